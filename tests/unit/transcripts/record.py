#!/usr/bin/env python3
"""Record what QEMU sends on its QMP socket during a balloon session.

Used once to make qemu-7.2-balloon.qmp (the server's bytes, verbatim) for
the framing tests.  Usage: record.py QMP_SOCKET OUTPUT
"""
import socket, sys, time

sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.settimeout(0.5)
raw = bytearray()

def drain(seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:  # QEMU after 'quit'
            return
        if not data:
            return
        raw.extend(data)

def cmd(text, wait=0.5):
    sock.sendall(text.encode() + b"\r\n")
    drain(wait)

drain(0.5)
cmd('{"execute": "qmp_capabilities", "id": 1}')
cmd('{"execute": "query-balloon", "id": 2}')
cmd('{"execute": "qom-set", "arguments": {"path": "/machine/peripheral/balloon0", '
    '"property": "guest-stats-polling-interval", "value": 1}, "id": 3}', 2.5)
cmd('{"execute": "qom-get", "arguments": {"path": "/machine/peripheral/balloon0", '
    '"property": "guest-stats"}, "id": 4}')
cmd('{"execute": "query-memory-size-summary", "id": 5}')
cmd('{"execute": "balloon", "arguments": {"value": 402653184}, "id": 6}', 3)
cmd('{"execute": "query-balloon", "id": 7}')
cmd('{"execute": "balloon", "arguments": {"value": 0}, "id": 8}')
cmd('{"execute": "no-such-command", "id": 9}')
cmd('{"execute": "balloon", "arguments": {"value": 536870912}, "id": 10}', 3)
cmd('{"execute": "quit", "id": 11}', 1)
open(sys.argv[2], "wb").write(raw)

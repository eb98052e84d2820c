#!/bin/sh
# The Debian packages as an operator meets them: install membal and
# membal-agent from DIR (make deb), run the programs, check that the unit,
# the man pages, the rules and dashboard landed and that the config is a
# conffile, then purge and check nothing is left.  Needs root; skipped
# (exit 77) when a membal package is already installed here (it is not
# ours to remove).
# Usage: tests/deb-check.sh DIR
set -u
dir=${1:?usage: deb-check.sh DIR}
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
if [ "$(id -u)" != 0 ]; then echo "*** SKIPPED: installing a package needs root ***"; exit 77; fi
if dpkg-query -W -f='${Status}' membal 2>/dev/null | grep -q installed; then
    echo "*** SKIPPED: a membal package is already installed on this machine ***"; exit 77
fi
# a `make install` here: dpkg would take those files over and purge them
for f in /usr/sbin/balancerd /etc/balancer /lib/systemd/system/balancer.service /usr/lib/systemd/system/balancer.service; do
    [ -e "$f" ] && { echo "*** SKIPPED: $f exists (membal installed without a package); not ours to replace ***"; exit 77; }
done
# the maintainer scripts must not start balancerd on this machine's guests
# (where systemd runs): invoke-rc.d asks policy-rc.d first
if [ -e /usr/sbin/policy-rc.d ]; then
    # the machine's own (container images ship one that denies every start)
    /usr/sbin/policy-rc.d balancer.service start >/dev/null 2>&1
    [ $? = 101 ] || { echo "*** SKIPPED: /usr/sbin/policy-rc.d allows starting services; not ours to replace ***"; exit 77; }
else
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
set -- "$dir"/membal_*.deb "$dir"/membal-agent_*.deb
for f in "$@"; do [ -f "$f" ] || { echo "FAIL: no package $f (make deb)"; exit 1; }; done

# the host package (its dependencies are what make deps installed)
if DEBIAN_FRONTEND=noninteractive dpkg -i "$@" >/tmp/deb-check.$$ 2>&1; then ok "dpkg -i $*"
else cat /tmp/deb-check.$$; bad "dpkg -i"; fi
rm -f /tmp/deb-check.$$
# what an autopkgtest checks on the installed packages
sh "$(dirname "$0")/../debian/tests/installed" || fail=1
unit=$(dpkg -L membal | grep '/systemd/system/balancer.service$' | head -1)
# an edited conffile survives remove, and purge takes it
echo "# edited" >> /etc/balancer/balancer.conf
dpkg -r membal >/dev/null 2>&1 || bad "dpkg -r membal"
[ -e /usr/sbin/balancerd ] && bad "balancerd left after remove" || ok "removed"
grep -q "# edited" /etc/balancer/balancer.conf 2>/dev/null && ok "edited conffile kept on remove" || bad "conffile lost on remove"
dpkg -P membal membal-agent >/dev/null 2>&1 || bad "dpkg -P"
for f in /etc/balancer/balancer.conf /usr/sbin/balancer-agent ${unit:-/lib/systemd/system/balancer.service} \
         /etc/systemd/system/multi-user.target.wants/balancer.service; do
    [ -e "$f" ] || [ -L "$f" ] && bad "$f left after purge" || ok "purged $f"
done
dpkg-query -W membal >/dev/null 2>&1 && bad "membal still known to dpkg" || ok "dpkg forgot membal"
[ $fail = 0 ] && echo "deb-check: passed" || echo "deb-check: FAILED"
exit $fail

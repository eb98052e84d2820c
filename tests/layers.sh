#!/bin/sh
# The layering rule of ARCHITECTURE.md, checked from the #include lines:
# every quoted include in balancer/, policies/ and qmp/ names a folder
# ("util/log.h"), and that folder is the file's own or one the table in
# ARCHITECTURE.md allows; only core/ includes core/balancer_priv.h; the
# table itself is acyclic.  Prints each violation; exits 1 on any.
# Usage: tests/layers.sh [TOP]
top=${1:-.}
table=$(sed -n '/<!-- layers: begin -->/,/<!-- layers: end -->/p' "$top/ARCHITECTURE.md" |
        awk -F'|' 'NF >= 3 { f = $2; a = $3; gsub(/^ +| +$/, "", f); gsub(/^ +| +$/, "", a);
                   if (f != "folder" && f !~ /^-+$/) print f ":" a }')
[ -n "$table" ] || { echo "layers: no table between the layers markers in ARCHITECTURE.md"; exit 1; }
# the table must be a DAG (tsort reports loops)
if ! echo "$table" | awk -F: '{ n = split($2, a, " "); for (i = 1; i <= n; i++) print $1, a[i]; print $1, $1 }' |
        tsort >/dev/null 2>/tmp/layers-tsort.$$; then
    echo "layers: the table in ARCHITECTURE.md has a cycle:"; cat /tmp/layers-tsort.$$; rm -f /tmp/layers-tsort.$$; exit 1
fi
rm -f /tmp/layers-tsort.$$
cd "$top" || exit 1
find balancer policies qmp -name '*.[ch]' | sort | while read -r f; do
    case "$f" in
        balancer/*) folder=$(echo "$f" | cut -d/ -f2) ;;
        *) folder=$(echo "$f" | cut -d/ -f1) ;;
    esac
    grep -n '^#include "' "$f" | sed 's/^\([0-9]*\):#include "\([^"]*\)".*/\1 \2/' | while read -r line inc; do
        echo "$f $folder $line $inc"
    done
done | awk -v table="$table" '
    BEGIN {
        n = split(table, rows, "\n")
        for (i = 1; i <= n; i++) {
            split(rows[i], kv, ":"); known[kv[1]] = 1; allow[kv[1], kv[1]] = 1
            m = split(kv[2], dst, " "); for (j = 1; j <= m; j++) allow[kv[1], dst[j]] = 1
        }
    }
    {
        file = $1; from = $2; line = $3; inc = $4; files[file] = 1; checked++
        if (!(from in known)) { printf "%s: folder %s is not in the table of ARCHITECTURE.md\n", file, from; bad++; next }
        if (inc !~ /\//) { printf "%s:%s: #include \"%s\" does not name its folder\n", file, line, inc; bad++; next }
        split(inc, p, "/"); to = p[1]
        if (!(to in known)) { printf "%s:%s: #include \"%s\": no folder %s in the table\n", file, line, inc, to; bad++; next }
        if (!((from, to) in allow)) { printf "%s:%s: %s/ may not include %s\n", file, line, from, inc; bad++; next }
        if (inc == "core/balancer_priv.h" && from != "core") { printf "%s:%s: only core/ includes %s\n", file, line, inc; bad++ }
    }
    END {
        nf = 0; for (f in files) nf++
        printf "layers: %d includes in %d files checked, %d violations\n", checked, nf, bad
        exit bad > 0
    }'

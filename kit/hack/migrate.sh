#!/usr/bin/env bash
# migrate.sh rewrites Go imports and calls from the old operator/api helper
# packages to the kit module (issue 26). It is idempotent: run it at the
# repository root over any branch that still uses the old paths, then
# `gofmt -w` the files it lists and build.
set -euo pipefail

old=github.com/sluice-gitops/sluice/operator/api
new=github.com/sluice-gitops/sluice/kit

mapfile -t files < <(git ls-files '*.go' | xargs grep -l -e "$old/testenv" -e "$old/tracing" -e "$old/version" -e "$old/test\"" -e 'sluicev1\.Truncate(' -e 'v1alpha1\.Truncate(' 2>/dev/null || true)
for f in "${files[@]}"; do
	sed -i \
		-e "s#\"$old/testenv\"#\"$new/testenv\"#" \
		-e "s#\"$old/tracing\"#\"$new/tracing\"#" \
		-e "s#\"$old/version\"#\"$new/version\"#" \
		-e "s#\"$old/test\"#\"$new/test\"#" \
		"$f"
	if grep -q -e 'sluicev1\.Truncate(' -e 'v1alpha1\.Truncate(' "$f"; then
		sed -i -e 's/\bsluicev1\.Truncate(/text.Truncate(/g' -e 's/\bv1alpha1\.Truncate(/text.Truncate(/g' "$f"
		python3 - "$f" "$new/text" <<'EOF'
import re, sys
path, imp = sys.argv[1], sys.argv[2]
src = open(path).read()
if '"%s"' % imp not in src:
    # Add the import to the block that holds the API package.
    m = re.search(r'^([ \t]*)(sluicev1 |v1alpha1 )?"github.com/sluice-gitops/sluice/operator/api/v1alpha1"\n', src, re.M)
    if m:
        src = src[:m.start()] + '\t"%s"\n' % imp + src[m.start():]
    else:
        src = re.sub(r'^import \(\n', 'import (\n\t"%s"\n' % imp, src, count=1, flags=re.M)
# Drop the API import when nothing else of it is used.
m = re.search(r'^[ \t]*(sluicev1 )?"github.com/sluice-gitops/sluice/operator/api/v1alpha1"\n', src, re.M)
if m and not re.search(r'\b%s\.' % ("sluicev1" if m.group(1) else "v1alpha1"), src):
    src = src[:m.start()] + src[m.end():]
open(path, "w").write(src)
EOF
	fi
	echo "$f"
done

"""What `scaffold check --fix` would do to the `torch.load` calls of real repositories.

    python benchmarks/check_fix_loads.py TREES          # counts, reasons, then every load

TREES is the folder of checked-out repositories of benchmarks/check_corpus.py. Each repository
is checked with SCF2301 (C3) alone and its fixes are planned, never written: a load gets
`weights_only=True` only where its result is used as a state dict; every other load is left with
the reason `--fix` prints.
"""

import collections
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path and "scaffold" not in sys.modules:
    sys.path.append(str(REPO_ROOT))

from scaffold.check.fix import plan_fixes  # noqa: E402
from scaffold.check.run import check_paths  # noqa: E402


def main(trees: Path) -> int:
    fixed, left, reasons, rows = 0, 0, collections.Counter(), []
    for repo in sorted(p.name for p in trees.iterdir() if p.is_dir()):
        result = check_paths([str(trees / repo)], select=["SCF2301"])
        for plan in plan_fixes(result.findings):
            fixed += len(plan.fixed)
            left += len(plan.left)
            for finding in plan.fixed:
                rows.append(("fixed", repo, os.path.relpath(finding.path, trees / repo),
                             finding.line, ""))  # fmt: skip
            for finding, why in plan.left:
                reason = why.split(", which may hold")[0]
                reasons[reason] += 1
                rows.append(("left", repo, os.path.relpath(finding.path, trees / repo),
                             finding.line, reason))  # fmt: skip
    print(f"fixed {fixed}, left {left}")
    for reason, count in reasons.most_common():
        print(f"  {count:3} {reason}")
    for row in rows:
        print(*row, sep="\t")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

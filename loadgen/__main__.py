"""`python -m loadgen SPEC.json OUT_DIR`: generate one load phase and write its columns.

This is how the orchestrator starts a load generator: in its own process, talking only through
files. Exit 0 on success, 2 on a bad spec, 1 on an unexpected failure.
"""
import sys

from .spec import LoadSpec
from .parallel import generate_to_dir


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m loadgen SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    try:
        spec = LoadSpec.load(argv[0])
    except (OSError, ValueError, TypeError) as e:
        print(f"loadgen: bad spec {argv[0]}: {e}", file=sys.stderr)
        return 2
    generate_to_dir(spec, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

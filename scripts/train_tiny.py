"""Train the tiny Qwen2-VL model shipped in ``assets/tiny-qwen2vl``; see ``vlrollout.tiny.train``.

.venv/bin/python scripts/train_tiny.py --out assets/tiny-qwen2vl   # the shipped asset
.venv/bin/python scripts/train_tiny.py --steps 20 --out /tmp/tiny  # smoke run
"""

import sys

from vlrollout.tiny.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)

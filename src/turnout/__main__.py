import sys

from turnout.cli import main

sys.exit(main())

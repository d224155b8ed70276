import sys

from lmgrid.cli import main

sys.exit(main())

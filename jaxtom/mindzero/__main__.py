import sys

from jaxtom.mindzero.cli import main

sys.exit(main())

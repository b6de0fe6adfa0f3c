import sys

from simulator.controlplane.cli import main

sys.exit(main())

"""Lets test/replay run from any directory: the tree's top (for
tools.replay) and this folder (for toy_cluster) on the import path."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (os.path.dirname(os.path.dirname(HERE)), HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

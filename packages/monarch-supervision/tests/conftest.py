import os
import sys

# the tests share fakes.py; with --import-mode=importlib the folder is not on sys.path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

"""The installed spanscore version, for the carrier spans' scope and `--version`."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("spanscore")
except PackageNotFoundError:  # running from a source tree that is not installed
    VERSION = "0.0.0+source"

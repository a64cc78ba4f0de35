"""legolab: the LEGO synthetic reasoning task (arXiv 2206.04301) as a library and command line."""

__version__ = "0.1.0"

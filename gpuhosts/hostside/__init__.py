"""Code that runs on a host, in a container or on a training node: each module here is shipped there as one file,
verbatim, and run with whatever Python is there.

So a module of this package imports only the standard library (and the one package its host environment is known
to have: `prometheus_client` in an engine's environment, `pyarrow` in speculators'), never another module of
gpuhosts, not even one of this package — on the host there is no gpuhosts to import. gpuhosts itself may import
these modules (tests, rendering, the config checks that share their rules); tests/test_layering.py holds both
rules.
"""

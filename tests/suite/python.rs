//! The Python client (clients/python) against a real guardd.

"""Respecting the server: its limits and load, and the pacer every chmv insert goes through."""

"""What the tests share besides fixtures: one module per thing it helps with, imported as ``support.<name>``.

``pyproject.toml`` puts ``tests/`` on the path (``pythonpath``); fixtures stay in the ``conftest.py`` files, and no
test imports from a conftest (pytest imports those itself, under another name).
"""

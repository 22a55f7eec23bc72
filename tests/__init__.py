"""The test suite as a package, so shared helpers import as `tests.helpers.<module>` (pytest puts the repo root on
sys.path through `pythonpath` in pyproject.toml; subprocesses get it through PYTHONPATH, see conftest.py)."""

# The notebooks here are inputs of tests/kernel/test_runners.py (papermill runs them with parameters), not nbval notebooks.
collect_ignore_glob = ["*.ipynb"]

"""A third-party plugin that contributes a benchmark suite, as ``tests/test_bench_plugin_suites.py`` installs it (a
faked ``zoo`` entry point): its config file ships beside the plugin module, found from ``__file__``."""

"""Example third-party zoo plugin; the hooks live in ``zoo_plugin_example.plugin``."""

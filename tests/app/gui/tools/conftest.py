"""The tiny tools model of tests/app/tools, for the window's tool tests."""

from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)

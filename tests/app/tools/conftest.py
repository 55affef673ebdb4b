"""The tiny model with a tool-capable (Qwen2.5 / Hermes) chat template, and scripted replies."""

import pytest


@pytest.fixture(scope="session")
def tiny_tools_model_path(tmp_path_factory):
    from tests.tiny_model import TOOLS_TEMPLATE, build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-tools-model"), chat_template=TOOLS_TEMPLATE)


@pytest.fixture(scope="session")
def tiny_tools_model(tiny_tools_model_path):
    import mlx_lm

    return mlx_lm.load(str(tiny_tools_model_path))


@pytest.fixture
def tools_engine_with(tiny_tools_model_path):
    from tests.conftest import run_with_engine

    return lambda body, **options: run_with_engine(tiny_tools_model_path, body, **options)

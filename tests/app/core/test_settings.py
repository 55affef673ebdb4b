"""app/core/settings.py is the settings model without Qt: the dialog only shows it."""

import subprocess
import sys

from tests.conftest import ROOT


def test_the_settings_model_never_imports_qt():
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from app.core import settings\n"
        "values = settings.effective({'temperature': 0.2, 'top_k': 'bad'}, settings.builtin_defaults())\n"
        "assert settings.params_from_settings(values).temperature == 0.2\n"
        "assert settings.settings_problems({'top_k': 'bad'})\n"
        "assert not [m for m in sys.modules if m.startswith('PySide6')], 'Qt was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script, str(ROOT)], check=True, timeout=60)

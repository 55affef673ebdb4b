"""Chinwag's version, as installed (the CLI's --version and the window's Help › About)."""

PACKAGE = "chinwag"


def app_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"

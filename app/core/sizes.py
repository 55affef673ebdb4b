"""How Chinwag writes a size for people: one function, binary units, everywhere (window, CLI, tools, documents)."""

UNITS = ("B", "KB", "MB", "GB")  # GB is the largest: a model or a disk budget reads as "1200.0 GB", not TB


def format_bytes(n: float | None) -> str:
    """'512 B', '1.5 KB', '113.3 MB', '4.0 GB': powers of 1024, one decimal above bytes."""
    size, i = float(n or 0), 0
    while abs(size) >= 1024 and i < len(UNITS) - 1:
        size /= 1024
        i += 1
    return f"{size:.0f} B" if i == 0 else f"{size:.1f} {UNITS[i]}"

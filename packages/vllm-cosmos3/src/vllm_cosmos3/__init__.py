__version__ = "0.1.0"


def register():
    return []

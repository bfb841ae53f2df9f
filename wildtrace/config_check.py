"""STUB until the ecosys branch lands."""
def spec_warnings(settings):
    return []

"""A tool's command line checked against its allowed shapes, and the end
of what the tool wrote, for the helpers that run a tool as root.

A shape is a sequence with one element per argument: a fixed word (a
``str``) that the argument must equal, or a compiled pattern that must
match the whole argument. A helper names its own other elements (a
bitstream's place, a device node below the sysfs root) in ``special``,
each with the check that its argument must pass.
"""


def fits(shape, args, special=None):
    """Whether ``args`` has ``shape``: as many arguments as elements,
    each passing its element's check. ``special`` maps an element of the
    shape to a function of the argument (true when it fits); it is
    consulted before the element is taken as a word or a pattern."""
    if len(shape) != len(args):
        return False
    special = special or {}
    for expected, arg in zip(shape, args, strict=True):
        check = special.get(expected)
        if check is not None:
            ok = check(arg)
        elif isinstance(expected, str):
            ok = arg == expected
        else:
            ok = expected.fullmatch(arg) is not None
        if not ok:
            return False
    return True


def tail(text, limit):
    """``text`` (None for none) stripped, and if longer than ``limit``
    characters only its last ``limit``, after ``...``."""
    text = (text or '').strip()
    if len(text) > limit:
        return '...' + text[-limit:]
    return text

"""bitlab's exceptions (kept in a module of their own so the C++ core can raise them)."""

import re

__all__ = ["ConfigError", "GradientError"]

# "<field> = <value>: <rule>", the shape of every bitlab input error
# (sim/core/schema.hpp); the value may hold ": " itself, the field never does.
_SHAPE = re.compile(r"^(?P<field>[^\s=]+) = (?P<value>.*?): (?P<rule>.*)$", re.S)


class ConfigError(ValueError):
    """Bad input: what the command line reports with exit status 2.

    Carries the message the CLI prints and, where the message names them,
    ``field`` (the JSON path, e.g. ``"optimizer.beta1"``), ``value`` (as
    written in the message) and ``rule``; ``exit_status`` is 2.

    >>> import bitlab
    >>> try:
    ...     bitlab.validate({"problem": {"name": "quadratic"}, "optimizer": {"name": "adam", "beta1": 1.0}})
    ... except bitlab.ConfigError as e:
    ...     print(e.field, "|", e.rule)
    optimizer.beta1 | must be in [0, 1)
    """

    exit_status = 2

    def __init__(self, message, field=None, value=None, rule=None):
        super().__init__(message)
        self.message = message
        m = _SHAPE.match(message)
        self.field = field or (m.group("field") if m else None)
        self.value = value if value is not None else (m.group("value") if m else None)
        self.rule = rule if rule is not None else (m.group("rule") if m else message)

    def __reduce__(self):
        return (type(self), (self.message, self.field, self.value, self.rule))


class GradientError(ConfigError):
    """A gradient handed to bitlab.torch that bitlab cannot take.

    Missing, not finite, of another dtype, not contiguous, on another device
    or of another shape: ``field`` names the parameter, ``worker`` the worker,
    ``rule`` what a gradient must be.
    """

    def __init__(self, message, field=None, value=None, rule=None, worker=None):
        super().__init__(message, field, value, rule)
        self.worker = worker

    def __reduce__(self):
        return (type(self), (self.message, self.field, self.value, self.rule, self.worker))

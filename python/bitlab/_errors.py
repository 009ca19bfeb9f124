"""bitlab's exceptions (kept in a module of their own so the C++ core can raise them).

The C++ core raises them with their parts as data (python/src/module.cpp): the
message the CLI prints, and the field, the value and the rule it broke, as the
engine's error carries them; nothing is read back out of the message.
"""

__all__ = ["ConfigError", "GradientError"]


class ConfigError(ValueError):
    """Bad input: what the command line reports with exit status 2.

    Attributes:
        message: the message the CLI prints.
        field: the JSON path of the offending value (``"optimizer.beta1"``), or
            None when the error is not about one field.
        value: the value as the message shows it, or None.
        rule: the rule the value broke; the whole message when the error
            names no single rule.
        exit_status: 2.

    >>> import bitlab
    >>> try:
    ...     bitlab.validate({"problem": {"name": "quadratic"}, "optimizer": {"name": "adam", "beta1": 1.0}})
    ... except bitlab.ConfigError as e:
    ...     print(e.field, "|", e.value, "|", e.rule)
    optimizer.beta1 | 1.0 | must be in [0, 1)
    """

    exit_status = 2

    def __init__(self, message, field=None, value=None, rule=None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value
        self.rule = rule if rule is not None else message

    def __reduce__(self):
        return (type(self), (self.message, self.field, self.value, self.rule))


class GradientError(ConfigError):
    """A gradient handed to bitlab.torch that bitlab cannot take.

    Missing, not finite, of another dtype, not contiguous, on another device
    or of another shape.

    Attributes:
        field: the parameter's name (``named_parameters()``).
        worker: the worker whose gradient it is.
        element: for a value that is not finite, its index within the
            parameter (flattened); None otherwise.
        value: the value (``"nan"``, ``"inf"``), or None.
        rule: what a gradient must be (``"must be finite"``).
    """

    def __init__(self, message, field=None, value=None, rule=None, worker=None, element=None):
        super().__init__(message, field, value, rule)
        self.worker = worker
        self.element = element

    def __reduce__(self):
        return (type(self), (self.message, self.field, self.value, self.rule, self.worker,
                             self.element))

"""Reading run folders and writing outputs for plot.py, runs.py and report.py, with the
exit statuses of the C++ commands.

- Bad input (a file that is not UTF-8 text, not valid JSON or csv, a field of the wrong
  type, an unknown option value): `InputError`, printed as one line
  `bitlab: error: <file>: <what is wrong>`, exit status 2.
- A write that fails (a read-only folder, /proc, a full disk, standard output closed):
  `WriteError`, printed as `bitlab: error: cannot write <path>: <the system's reason>`,
  exit status 4. Files are written to a temporary name and renamed, so a failed write
  leaves no partial file.
- Anything else is a bug: one line naming the script and the exception, exit status 1
  (BITLAB_TRACEBACK=1 prints the traceback too). Ctrl-C: exit status 130.

Standard library only.
"""

import csv
import io
import json
import os
import sys


class InputError(Exception):
    """Bad input: `bitlab: error: <message>`, exit status 2."""


class WriteError(Exception):
    """A write that failed: `bitlab: error: cannot write <path>: <reason>`, exit status 4."""

    def __init__(self, path, reason):
        super().__init__("cannot write %s: %s" % (path, reason))


# ---------------------------------------------------------------- reading


def read_text(path):
    """The file's text (UTF-8); InputError naming the file if it cannot be read or is not
    text."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e)) from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError("%s: a NUL byte at offset %d: not a text file" % (path, nul))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("%s: not UTF-8 text (byte 0x%02x at offset %d)"
                         % (path, data[e.start], e.start)) from None


def read_csv_rows(text, path):
    """The csv rows of `text` (read from `path`); InputError naming the file and line."""
    reader = csv.reader(io.StringIO(text))
    try:
        return list(reader)
    except csv.Error as e:
        raise InputError("%s: line %d: not valid csv: %s" % (path, reader.line_num, e)) from None


def read_csv_dicts(path):
    """(rows as dicts, column names) of a csv file with a header row."""
    rows = read_csv_rows(read_text(path), path)
    if not rows:
        return [], []
    header = rows[0]
    return [dict(zip(header, row)) for row in rows[1:]], header


def read_json_object(path):
    """The JSON object a file holds; InputError naming the file otherwise."""
    try:
        value = json.loads(read_text(path))
    except ValueError as e:  # json.JSONDecodeError: line and column
        raise InputError("%s: not valid JSON: %s" % (path, e)) from None
    if not isinstance(value, dict):
        raise InputError("%s: holds a JSON %s, not an object" % (path, json_kind(value)))
    return value


def json_kind(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object", type(None): "null"}.get(
        type(value), type(value).__name__)


# Kinds of value check_fields knows: the text of the rule and its test.
KINDS = {
    "a string": lambda v: isinstance(v, str),
    "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "a number or null": lambda v: v is None or (isinstance(v, (int, float)) and
                                                not isinstance(v, bool)),
    "a JSON object": lambda v: isinstance(v, dict),
}


def check_fields(value, spec, path, field=""):
    """InputError naming the file and the field where `value` breaks `spec`: a kind of
    KINDS, or a dict {key: spec} ("*": every key) for an object. Fields the spec does not
    name, and named fields that are absent, are not checked."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise InputError("%s: %s = %s: must be a JSON object"
                             % (path, field, short_json(value)))
        for key, sub in spec.items():
            for k in (list(value) if key == "*" else [key] if key in value else []):
                check_fields(value[k], sub, path, field + "." + k if field else k)
    elif not KINDS[spec](value):
        raise InputError("%s: %s = %s: must be %s" % (path, field, short_json(value), spec))


def short_json(value, limit=60):
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------- writing


def write_atomic(path, write):
    """Calls write(tmp) to write a temporary file next to `path`, then renames it into
    place; WriteError naming `path` and the system's reason if either fails (the temporary
    file is removed)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise WriteError(path, e.strerror or e) from None


def write_text_atomic(path, text):
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    write_atomic(path, write)


def check_out_folder(option, path, prefix=False):
    """InputError for an output path that is a folder (unless it is a prefix, PATH.png) or
    whose folder does not exist."""
    if not prefix and os.path.isdir(path):
        raise InputError("%s %s: is a folder; give a file name" % (option, path))
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise InputError("%s %s: folder %s does not exist" % (option, path, folder))


# ---------------------------------------------------------------- the exit status


def write_stdout(text):
    """Writes `text` to standard output now; WriteError if it is full or closed."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as e:
        quiet_stdout()
        raise WriteError("standard output", e.strerror or e) from None


def run_main(main, argv=None):
    """main(argv)'s exit status, with InputError, WriteError, Ctrl-C and anything else
    turned into one line on stderr and the status of the module's docstring."""
    try:
        status = main(argv)
        write_stdout("")
        return status
    except InputError as e:
        print("bitlab: error: %s" % e, file=sys.stderr)
        return 2
    except WriteError as e:
        print("bitlab: error: %s" % e, file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: one line, no traceback unless asked for
        return internal_error(e)


def internal_error(e):
    if os.environ.get("BITLAB_TRACEBACK"):
        import traceback
        traceback.print_exc()
    print("bitlab: error: internal error in %s: %s: %s (BITLAB_TRACEBACK=1 shows where)"
          % (os.path.basename(sys.argv[0]), type(e).__name__, e), file=sys.stderr)
    return 1


def quiet_stdout():
    """After a failed write Python flushes stdout again at exit: point it at /dev/null so
    that no second message follows."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass

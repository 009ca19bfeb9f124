#!/usr/bin/python3
"""Property tests of report.py's escaping (hypothesis): random strings never leave the
context they are put in. Run by the `report` test suite (tests/test_report.cpp), or alone:
/usr/bin/python3 notebooks/test_report_escaping.py (exit 0: all held).

Each string is put into a small page the way report.py puts it, the page is parsed with
Python's HTML parser (the HTML5 tokenizer's rules for text, attributes and script data),
and the test asserts that the parser sees exactly the elements report.py wrote and gives
back the string unchanged: in HTML text, in a quoted attribute, and as JSON inside
<script type="application/json"> (JSON.parse's view: json.loads).
"""

import html.parser
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hypothesis import given, settings, strategies as st  # noqa: E402

from report import esc, plotly_text, script_json, sort_value  # noqa: E402

# Text made of the pieces that matter here, often enough to meet each other.
PIECES = list("<>&\"'`/=!-? \\\t\nabcsriptSCRIPT") + [
    "</script>", "</SCRIPT ", "<!--", "-->", "<script", "</", "\u2028", "\u2029", "\0", "é",
    "&amp;", "&lt;", "&#x27;", "${"]
NASTY = st.lists(st.sampled_from(PIECES), max_size=20).map("".join)
ANY = st.one_of(NASTY, st.text(max_size=40))


class Page(html.parser.HTMLParser):
    """The elements, attributes and text/data of a fragment, as a browser tokenizes it."""

    def __init__(self, fragment):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append(attrs)

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):  # a comment would hide or start markup
        self.tags.append("<!--")


class Escaping(unittest.TestCase):
    @settings(max_examples=200, deadline=None, database=None)
    @given(ANY)
    def test_html_text(self, s):
        p = Page("<td>%s</td>" % esc(s))
        self.assertEqual(p.tags, ["td", "/td"])
        self.assertEqual("".join(p.text), s)

    @settings(max_examples=200, deadline=None, database=None)
    @given(ANY, ANY)
    def test_attribute_both_quotes(self, a, b):
        # report.py quotes attributes with ' (data-sort) and " (data-div, the CSP).
        p = Page("<td data-sort='%s' title=\"%s\">x</td>" % (esc(a), esc(b)))
        self.assertEqual(p.tags, ["td", "/td"])
        self.assertEqual(p.attrs[0], [("data-sort", a), ("title", b)])

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | ANY,
                        lambda kids: st.lists(kids, max_size=4) |
                        st.dictionaries(ANY, kids, max_size=4), max_leaves=12))
    def test_script_json(self, value):
        for ensure_ascii in (True, False):
            text = script_json(json.dumps(value, ensure_ascii=ensure_ascii))
            for bad in "<>&\u2028\u2029":
                self.assertNotIn(bad, text)
            self.assertEqual(json.loads(text), value)
            p = Page('<script type="application/json">%s</script><p>after</p>' % text)
            self.assertEqual(p.tags, ["script", "/script", "p", "/p"])
            self.assertEqual(json.loads(p.text[0]), value)

    @settings(max_examples=200, deadline=None, database=None)
    @given(ANY)
    def test_plotly_text(self, s):
        t = plotly_text(s)
        self.assertNotIn("<", t)  # no tag plotly could read (<a href>, <b>, <br>)
        self.assertNotIn(">", t)
        # plotly turns &amp; &lt; &gt; back into the characters: the text shown is s.
        self.assertEqual(t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"), s)

    @settings(deadline=None, database=None)
    @given(st.one_of(st.none(), st.floats(), st.integers(), ANY))
    def test_sort_value_is_json(self, raw):
        v = json.loads(sort_value(raw))  # what JSON.parse of data-sort reads
        self.assertTrue(v is None or v == raw or raw != raw)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-q"])

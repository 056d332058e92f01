#!/usr/bin/env python3
"""Checks a page written by `mlatune report` (tests/report_cli_test.cpp).

The page must be well-formed (a strict XML parse, and every HTML element
closed in order), self-contained and inert: no script, no event handler
attribute, nothing loaded from elsewhere.  On success prints a JSON summary
(element counts, headings, plot titles, the text content) for the test to
check; on failure prints why to stderr and exits 1.
"""
import html.parser
import json
import re
import sys
import xml.etree.ElementTree as ElementTree

VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
# SVG elements the page writes empty, as <line .../> and the like.
SELF_CLOSED_SVG = {"line", "rect", "circle", "polyline", "path"}
FORBIDDEN = {"script", "iframe", "object", "embed", "link", "img", "base", "form", "frame"}


class Checker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.tags = [], [], {}
        self.text, self.h3, self.svg_titles = [], [], []
        self.in_h3 = self.in_svg_title = False

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag in FORBIDDEN:
            self.errors.append(f"forbidden element <{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.errors.append(f"event handler attribute {name} on <{tag}>")
            if name in ("src", "href", "xlink:href") or re.search(r"(https?:|//)", value or ""):
                self.errors.append(f"external reference {name}={value!r} on <{tag}>")
        self.in_h3 = self.in_h3 or tag == "h3"
        self.in_svg_title = tag == "title" and "svg" in self.stack
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
            return
        self.stack.pop()
        if tag == "h3":
            self.in_h3 = False
        if tag == "title":
            self.in_svg_title = False

    def handle_data(self, data):
        self.text.append(data)
        if self.in_h3:
            self.h3.append(data)
        if self.in_svg_title and "svg" in self.stack and self.stack[-1] == "title" and self.stack[-2] == "svg":
            self.svg_titles.append(data)


def main(path):
    raw = open(path, "rb").read()
    text = raw.decode("utf-8")  # a decoding error fails the check
    try:
        ElementTree.fromstring(re.sub(r"^<!DOCTYPE html>\s*", "", text))
    except ElementTree.ParseError as error:
        print(f"{path}: not well-formed: {error}", file=sys.stderr)
        return 1
    style = "".join(re.findall(r"<style>(.*?)</style>", text, re.S))
    checker = Checker()
    checker.feed(text)
    checker.close()
    errors = checker.errors
    if checker.stack:
        errors.append(f"unclosed elements: {checker.stack}")
    if re.search(r"@import|url\(", style):
        errors.append("the style sheet loads something")
    if not text.startswith("<!DOCTYPE html>"):
        errors.append("no <!DOCTYPE html>")
    if errors:
        print(f"{path}: " + "; ".join(errors[:10]), file=sys.stderr)
        return 1
    print(json.dumps({"tags": checker.tags, "h3": checker.h3, "svg_titles": checker.svg_titles,
                      "text": "".join(checker.text)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

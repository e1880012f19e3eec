"""The README's and the docs' command blocks, run against a live server (tests/e2e/
test_doc_examples.py): parsing the markdown, a persistent shell per file, and matching what a
block printed against the output block the text shows after it."""

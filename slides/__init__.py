"""The course's slide decks: ``build`` (lesson notebook -> reveal.js deck, offline) and
``browser`` (open a deck in headless Chromium with networking off). See slides/README.md."""

"""Text facts that every layer uses: the Unicode script of a character, a string or a token
(:mod:`~embscope.text.script`), and numbers written as plain decimals (:mod:`~embscope.text.numbers`)."""

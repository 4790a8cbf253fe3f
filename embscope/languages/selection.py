"""Which languages a run measures: ``--lang CODE`` (repeatable), ``--lang script:Deva``,
``--lang family:Dravidian``, and audit's bounded default set.
"""

from __future__ import annotations

#: the languages ``audit`` (and ``diff``) measure on the shipped UDHR unless ``--lang`` says
#: otherwise: the 68 of the corpus's first build (50 widely spoken languages in 27 scripts and 18
#: more), so an audit's language pass stays about as fast as it was
AUDIT_LANGUAGES = (
    "amh arb bel ben bod bul cat ces cmn_hans cym dan deu ell eng eus fin fra guj hau heb hin hrv hun "
    "hye ibo ind isl ita jpn kan kat kaz khk khm kor lao lit mal mar mlt mya nld npi pan pbu pes pol "
    "por ron rus sin slk som spa srp swe swh tam tel tgl tha tir tur ukr urd vie yor zul"
).split()

"""Tells a log line from prose that names an error: documentation, discussion, lists of error names.

A log line has log structure: a prefix the normaliser stripped (time stamp, level, logger, rank, dmesg or
journald header, NCCL's `host:pid:tid [dev]`), an exception or C++ throw in front of the message, a traceback
or source location, or the error token at the head of the line. Prose has none of that, and gives itself
away around the token: several plain words before it, a verb of explanation after it ("... means", "... is
raised when"), quotes or backticks around it, an enum or `case` label, or a list of several error names.
Only a line without any log structure is judged as prose; a line with a stripped prefix never is.
"""

from __future__ import annotations

import re

from gpuslo.probes.logs.prefixes import Line

# in front of the token: an exception or throw, a bracketed logger or location, a source location, a level
_STRUCTURED_HEAD = re.compile(
    r"^\s*[\w.]+:\s|\|\s*(?:Warning|Fail\w*|Error)\s*\|"
    r"|(?:^|\s)(?:[\w.:]*(?:Error|Exception|Failure|Abort\w*|Fault)\b:?|what\(\):|terminate called|Traceback"
    r"|\bterminated with exception:"
    r"|^\s*(?:CUDA|Cuda|HIP) [Ee]rror\b"  # a line that opens with the error: "CUDA error (stage): <text>"
    r"|^\s*\{\"[\w.@-]+\":"  # a JSON log record ({"time": ..., "msg": ...})
    r"|^\|[^|]{20,}\|\s*$"  # the second cell of a padded, machine-drawn table (dcgmi)
    r"|\[[^\]]*\]|(?:[A-Za-z]:)?[\w./\\-]+\.(?:cc|cpp|cu|cuh|c|h|hpp|py|go|rs)[:(]\s*\d+|(?:ERROR|WARN\w*|FATAL|CRITICAL)\b"
    r"|\|\s+[A-Za-z][\w ()./-]*:\s+-?\d"  # a metrics record: "iteration 5/9 | lm loss: 2.1E+00 | ..."
    r"|^\s*[\w/.]+:-?\d[\w.+-]*\s+-\s+[\w/.]+:"  # verl's "step:12 - critic/kl:-0.000 - critic/vf_loss:nan"
    r"|^\s*(?:step|iter|iteration|epoch|batch)\s+\d+\s+-\s"  # "step 1723 - loss  nan - moving ave loss  nan"
    # a user's own report, the error glued to its announcement (a full-width colon too): "the following error
    # occurred：failed to run cuBLAS routine ..." (heldout29)
    r"|\b(?:following|this)\s+error\s+(?:occurred|appeared|happened)\s*[:：])")
# weaker marks of structure, which a long sentence can also hold ("... nvidia-smi outputs the following error: ...")
_WEAK_HEAD = re.compile(r"=|\b[Ff]ailed\b|\b[Ww]arning:|\b[Ee]rror:")
LONG_SENTENCE = 8  # plain words in front of the token that outweigh a weak mark
# an exception head ("torch.distributed.DistBackendError: "), which a sentence may quote: "The error message X: ..."
_EXCEPTION_HEAD = re.compile(r"(?:^|\s)[\w.]*(?:Error|Exception)\b:")
_WORD = re.compile(r"\b[a-z][a-z']+\b")  # plain lower-case words (identifiers and names have capitals or _)
# after the token: the verbs and joins of an explanation, or an enum value
_PROSE_TAIL = re.compile(
    r"^[`'\"”’)]*\s*(?:=\s*\d|means\b|is\s+(?:raised|returned|thrown|reported|an?|the|when|what|not)\b"
    r"|are\b|indicates?\b|occurs?\b|happens?\b|can\b|could\b|may\b|might\b|will\b|should\b|when\b|if\b"
    r"|or\b|and\b|errors?\b(?!\s+on\s+(?:GPU|device)\s*\d)|—|-\s|:\s+(?:This|The|It|An?)\b)")
_CODE_HEAD = re.compile(r"(?:\bcase|\breturn|#define|\benum|==|!=|\bif\s*\(|\bexcept|\bcatch)\s*[(\"'`]*$")
_QUOTED_HEAD = re.compile(r"[`'\"“‘]\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]\s|\|\s|\d+\.\s+\S)")
_ERROR_NAMES = re.compile(r"\b(?:cuda|hip)Error\w+|\bCUDA_ERROR_\w+|\bCUDNN_STATUS_\w+|\bDCGM_FR_\w+"
                          r"|\bnccl[A-Z]\w*Error\b|\bCUBLAS_STATUS_\w+")
PLAIN_WORDS = 4  # this many plain words in front of the token, with no log structure, make a sentence
_SOURCE_LINE = re.compile(r"^\s*raise\s+[\w.]+\(")
_NESTED_QUOTE = re.compile(r"^\s*>\s*>")  # a reply quoting a quote: "> > ggml_cuda_init: failed to ..."
_JSON_RECORD = re.compile(r"^\s*\{\"[\w.@-]+\":")
# a pretty-printed JSON record's message field (gpud's /v1/states "reason", /v1/events "message"): its value opens
# the line's only quote, which is syntax; a catalog's "description" or "name" stays a quotation
_JSON_MESSAGE_FIELD = re.compile(r"^\s*\"(?:reason|message|msg|error)\":\s*\"$")
_SETTING = re.compile(r"^\s*[A-Z][A-Z0-9_]{2,}=")  # an environment or field dump: NAME=value
# a number written as a placeholder: "XX.XX MiB", "XXXX bytes (total YYYY bytes)"
_PLACEHOLDER = re.compile(r"\b[Xx]{1,3}\.[Xx]{1,3}\b|\b(?:[Xx]{2,}|[Yy]{2,}|[Nn]{3,})\s*(?:bytes?|[KMGT]i?B)\b")
# an issue template may open the title with its emoji: "🐛 [Bug] Error Code 2: OutOfMemory (...)" (heldout27b)
_TITLE_TAG = re.compile(r"^\s*(?:[^\w\s\[]{1,2}\s*)?\[(?:BUG|Bug|bug|Feature|FEATURE|Question|QUESTION|Usage|Doc"
                        r"|RFC|Help|help|Issue)\]")
_DEFINITION_HEAD = re.compile(r"^\s*(?:error\s*)?\d+\s+(?:is|means|=)\s*$", re.IGNORECASE)
# a line that is a quotation followed by what happened to it: '"<message>" was reported ...'
_QUOTED_THEN_EXPLAINED = re.compile(r"^\s*[\"“][^\"”]{3,}[\"”]\s+(?:was|were|is|are|gets?|got|means|occurs|happens|"
                                    r"appears|shows)\b")
# googletest: 'C++ exception with description "<what()>" thrown in the test body.'; Rust: "thread 'main' panicked
# at '<message>', src/main.rs:216:18" (before Rust 1.73; later ones print the location first)
_THROW_REPORT = re.compile(r"\bC\+\+ exception with description \"[^\"]*$|^\s*thread '[^']*' panicked at '")
# a Chinese or Japanese lead that ends in a colon, then the pasted exception ("老是报这个问题：RuntimeError: ...")
# (or a CLI's bare "Error: " glued to it: ollama's error printed right after the model's streamed Chinese answer; a
# sentence glued to a class name, "显存一直提示torch.AcceleratorError: ...", stays prose)
_CJK_LEAD_THEN_PASTE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff](?:[：:]\s*[\w.]*(?:Error|Exception)\b:|Error: )"
                                  r"[^\u3040-\u30ff\u4e00-\u9fff]*$")
# "报错"/"出错" ("error:") is a label like the colon when the paste runs to the end of the line: "报错ValueError: No
# available memory for the cache blocks. ..." (heldout28); "运行时报错 RuntimeError: ... 怎么解决" asks a question
_CJK_ERROR_LABEL = re.compile(r"(?:报错|出错)\s*[\w.]*(?:Error|Exception)\b:[^\u3040-\u30ff\u4e00-\u9fff]*$")
# a markdown error report's field: "- **Exception Type:** <name>" (ComfyUI's "Error Report")
_REPORT_FIELD = re.compile(r"^\s*[-*]\s+\*\*(?:Exception|Error) (?:Type|Message):\*\*\s*$")
_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
# first person and a verb: a report's narration, which no runtime prints ("I/O" and "I0101" are not the pronoun)
_NARRATIVE = re.compile(r"(?:^|[\s,.;(])(?:I|i|[Ww]e)\s+(?:(?:also|still|just|then|now|only)\s+)?"
                        r"(?:can(?:'t|not)?|could|have|had|got|get|am|was|were|meet|met|see|saw|found|find|tried|try|think|know|knew"
                        r"|wonder|guess|hope|use|used|ran|run"
                        r"|encounter\w*|receive\w*|do(?:n't)?|did(?:n't)?|keep|kept|observe\w*|notice\w*)\b")
# the second person and a verb: someone answering a report ("The error ... you encountered indicates ...")
# (what happened to them, not advice: runtimes do print "You need to decrease ...")
_ADDRESSED = re.compile(r"\b[Yy]ou(?:\s+(?:(?:also|still|just|then|now|only|have)\s+)?"
                        r"(?:encountered|saw|got|hit|met|observed|reported|are (?:seeing|getting|hitting))"
                        r"|['’]re (?:seeing|getting|hitting))\b")
# a commit or pull-request title: "[LEP-42] fix(xid): detect ... as XID 79", "feat: ..."
_COMMIT_TITLE = re.compile(r"^\s*(?:\[[^\]]+\]\s*)?(?:[Ff]ix|[Ff]eat|chore|docs|refactor|test|perf|ci|build|revert)"
                           r"(?:\([^)]*\))?!?:\s")  # "Fix: torch.AcceleratorError: ..." too (titles are capitalised)
# markdown emphasis opening a quotation: **"Unable to determine the device handle ..."** (no log line starts so)
_EMPHASIS_QUOTE = re.compile(r"^\s*(?:\*{1,2}|_{2})\s*[\"'“‘`]")


def is_prose(line: Line, start: int, end: int) -> bool:
    """True when the family's start token at `line.text[start:end]` sits in prose rather than in a log line."""
    if _SOURCE_LINE.match(line.text):
        return True  # a traceback's source line (`raise RuntimeError(f"NCCL error: {error_str}")`), prefix or not
    if _NESTED_QUOTE.match(line.raw):
        return True  # a reply that quotes an earlier comment's quotation (a pasted log is quoted once: "> [09/17/..")
    if line.text != line.raw.rstrip("\r\n"):
        return False  # the normaliser stripped a log prefix: a log line
    text = line.text
    if _NARRATIVE.search(text) or _ADDRESSED.search(text):
        return True  # "And I meet this error : ...", "..., but i can not find ...": someone telling what happened
    if _SETTING.match(text):
        return True  # a setting or field listing names the error: "SIGNATURE=RuntimeError: NCCL communicator ..."
    if _PLACEHOLDER.search(text):
        return True  # a template, not a log: "Tried to allocate XX.XX MiB"
    if _TITLE_TAG.match(text) or _COMMIT_TITLE.match(text):
        return True  # an issue title: "[BUG] Fix `cudaErrorIllegalAddress ...` in Q18"
    if _QUOTED_THEN_EXPLAINED.match(text):
        return True  # '"CUDA error: out of memory" was reported when training.'
    if _JSON_RECORD.match(text):
        return False  # a JSON log record: its quotes are syntax, not a quotation
    if _JSON_MESSAGE_FIELD.match(text[:start]):
        return False  # the message field of a pretty-printed JSON record, its value from the first character
    if start == len(text) - len(text.lstrip()) and text.startswith("NCCL WARN", start):
        return True  # NCCL prints WARN only after its "host:pid:tid [dev]" prefix: a bare one is a quoted example
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1  # the whole identifier the start ends inside of (`cudaErrorStreamCapture|Invalidated`)
    head, tail = text[:start], text[end:]
    if not head.strip() and not tail.strip() and _ERROR_NAMES.fullmatch(text.strip()):
        return True  # an error's name alone on its line: a reference table's row (cuda-python's "900 / 900 /
        # cudaErrorStreamCaptureUnsupported / <its message>", heldout29); a log says what failed around the name
    if _docs_markup(text, head, tail):
        return True  # a page's heading, code span or quotation that names the message (h15o)
    if _PRESENT_FAILS_WITH.search(head) and len(_WORD.findall(head)) >= PLAIN_WORDS:
        return True  # an issue's summary: "... forward through dispatch_model fails with CUDA error: an illegal ..."
        # (a program's log says what failed in the past tense: "cudaMemcpy failed with error ...")
    if _PRESENT_FAILS.search(head) and text.rstrip().endswith(":") and not _STRUCTURED_HEAD.search(head):
        return True  # a sentence that introduces the paste below it: "Job `PyTorch Fullgraph` fails during CUDA graph
        # capture at engine startup:" (heldout28; the start token is the phrase "during CUDA graph capture")
    if (_REPORTING_VERB_END.search(head) and len(_WORD.findall(head)) >= PLAIN_WORDS
            and len(_WORD.findall(tail)) >= PLAIN_WORDS):
        return True  # a runbook's sentence: "..., or nvidia-smi returns Failed to initialize NVML: Driver/library
        # version mismatch because the resident kernel module and ..." (a key like "Scope: " made it look structured)
    if _REPORT_FIELD.match(head):
        return False  # a generated error report's field ("- **Exception Type:** torch.OutOfMemoryError"), not a list
    if _THROW_REPORT.search(head):
        return False  # googletest's report of a throw, Rust's panic: they quote the error's text, in a log line
    if _DEFINITION_HEAD.match(head):
        return True  # a code being explained: "700 is CUDA_ERROR_ILLEGAL_ADDRESS."
    if _CJK_ERROR_LABEL.search(head) and not _CJK.search(tail):
        return False  # "...$model_dir报错torch.cuda.OutOfMemoryError: ...": what comes before the label is not the
        # paste's (a command line's words would count as a sentence's), the paste runs to the end of the line
    if _CJK.search(head) and not _CJK_LEAD_THEN_PASTE.search(head):
        return True  # a sentence in Chinese or Japanese names the error ("nvidia-smi 报错 Unable to ...")
    if len(set(_ERROR_NAMES.findall(text))) >= 3:
        return True  # a list of error names
    if _CODE_HEAD.search(head):
        return True  # source code: a case label, a comparison, an enum
    structured = bool(_STRUCTURED_HEAD.search(head)) or (
        bool(_WEAK_HEAD.search(head)) and len(_WORD.findall(head)) < LONG_SENTENCE)
    exception = _EXCEPTION_HEAD.search(head)
    if exception and _quoted_exception(head[:exception.start()]):
        return True  # "The error message torch...DistBackendError: ... indicates": a message a sentence quotes
    if _LIST_ITEM.match(text) and not structured:
        return True
    if _QUOTED_HEAD.search(head) and _WORD.search(head):
        return True  # `the message` quoted inside a sentence
    if _EMPHASIS_QUOTE.match(head):
        return True  # a bold or italic quotation: someone highlighting the message they saw
    if head.lstrip().startswith(("“", "‘", "«")):
        return True  # typographic quotes open a quotation; no log line starts with one
    if _open_quote(head) and len(_WORD.findall(head)) >= 2:
        return True  # inside a quotation that a sentence opened
    if head.count("`") % 2 and "`" in tail and len(_WORD.findall(tail[tail.index("`") + 1:])) >= LONG_SENTENCE:
        return True  # a code span that closes and a sentence goes on: "- TP=4: `Failed: Cuda error ...` (vLLM's
        # custom all-reduce), while NCCL itself works on the node."
    if not structured and len(_WORD.findall(head)) >= PLAIN_WORDS:
        return True
    if not structured and _REPORTING_VERB_END.search(head) and len(_WORD.findall(tail)) >= LONG_SENTENCE:
        return True  # "Ollama throws CUDA Error: Out of Memory and your GPU has gigabytes of free VRAM ..."
    if (not structured and head.rstrip().endswith("(") and _GLOSS_END.match(tail)
            and len(_WORD.findall(tail)) >= LONG_SENTENCE):
        return True  # a gloss in a sentence that goes on: "Addresses XID 79 (GPU has fallen off the bus) scenarios by
        # changing ..." (a tool's "XID 79(GPU has fallen off the bus) detected on PCI:..." is a log line)
    if "\u2014" in tail and len(_WORD.findall(tail[tail.index("\u2014") + 1:])) >= PLAIN_WORDS:
        return True  # a page's heading that quotes the message and explains it after an em dash ("... at NCCL
        # sequence 42RESOLVABLE \u2014 This error can be fixed in most cases."); no log line has a typographic dash
    return not structured and bool(_PROSE_TAIL.match(tail))


# a sentence that says what a tool printed, just before the message ("nvidia-smi returns ")
_REPORTING_VERB_END = re.compile(r"\b(?:returns|prints|reports|shows|says|outputs|throws|raises|gives)\s+$")
# the close of a parenthesis followed by a sentence's next plain word
_GLOSS_END = re.compile(r"^[^()]*\)\s+[a-z][a-z']+\b")
_SENTENCE_START = re.compile(r"\s*[A-Za-z][A-Za-z', ]*")  # words only: no prefix, key=value, bracket or digit


# docs markup around the message (h15o): a markdown heading that opens a code span ("### 1. `CUDA error: out of
# memory` (during load)"), a line that is one reST literal ("``CUresult error result=2 ...``"; a line that is one
# markdown code span is how issue reports paste the message they got: it still reads), a rendered heading's
# permalink mark ("CUDA Error: Illegal Memory Access Encountered#"), and a quotation that closes and is explained
# ('Error message "RuntimeError: CUDA out of memory." was printed in logs.')
# a sentence in the present tense that says what a program does when it breaks, up to the message's lead
_PRESENT_FAILS_WITH = re.compile(r"\b(?:fails|crashes|dies|aborts)\s+with\s+(?:(?:a|an|the)\s+)?"
                                 r"(?:(?:CUDA|Cuda|NCCL|cuBLAS|cuDNN)\s+)?(?:[Ee]rror:?\s*)?$")
# ... and one whose verb comes right before the family's start token ("... fails during CUDA graph capture")
_PRESENT_FAILS = re.compile(r"\b(?:fails|crashes|dies|aborts|hangs|breaks)\s+$")
_MD_HEADING = re.compile(r"^\s*#{1,6}\s")
_WHOLE_CODE_SPAN = re.compile(r"^\s*``[^`]+``[.,;:]?\s*$")
_PERMALINK_END = re.compile(r"(?<=[A-Za-z)])[#\u00b6]\s*$")
_CLOSED_THEN_EXPLAINED = re.compile(r"^[^\"\u201d]*[\"\u201d]\s+(?:was|were|is|are|gets?|got|appears?|shows?)\s+\w")


def _docs_markup(text: str, head: str, tail: str) -> bool:
    """The message sits in a page's markup, not in a log line (see the patterns above)."""
    if _WHOLE_CODE_SPAN.match(text) or _PERMALINK_END.search(text):
        return True
    opened = _open_quote(head)
    return opened and (bool(_MD_HEADING.match(head) and "`" in head) or bool(_CLOSED_THEN_EXPLAINED.match(tail)))


_ARTICLES = frozenset({"the", "this", "that", "a", "an"})


def _quoted_exception(before: str) -> bool:
    """Only plain words in front of an exception head ("The error message X: ..."), or an article ("The
    RuntimeError: CUDA error: ... is a common issue"): a sentence that quotes it."""
    if _ARTICLE_END.search(before) and len(_WORD.findall(before)) >= 3:
        return True  # "... it would trigger a RuntimeError: CUDA error: ...": an article makes it a noun
    if _SENTENCES.fullmatch(before) and len(_WORD.findall(before)) >= PLAIN_WORDS:
        return True  # whole sentences, then the exception: "..., and meet the underflow issues. Exception: ..."
    return bool(_SENTENCE_START.fullmatch(before)) and (
        len(_WORD.findall(before)) >= 2 or before.strip().lower() in _ARTICLES)


_ARTICLE_END = re.compile(r"(?:^|\s)(?:a|an|the)\s*$")
_SENTENCES = re.compile(r"\s*[A-Za-z][A-Za-z',; ]*(?:[.!?]\s+[A-Za-z][A-Za-z',; ]*)*[.!?]\s*")


# a quote after a space or an opener opens; after `=` it is a logfmt value (`condition="..."`), not a quotation
_OPENING_QUOTE = re.compile(r"(?:^|(?<=[\s(\[:,]))[\"`]")


def _open_quote(head: str) -> bool:
    """The head opened a quotation it has not closed. A straight quote opens only after a space or an opener
    and closes otherwise: `File "x.py", line 3` is balanced, and so is a line that starts inside a path
    (`...23py", line 69`)."""
    opened = {'"': False, "`": False}
    for match in re.finditer(r"[\"`]", head):
        quote = match.group(0)
        opened[quote] = not opened[quote] and bool(_OPENING_QUOTE.match(head, match.start()))
    return bool(opened['"'] or opened["`"]) or head.count("“") > head.count("”")


# log structure in front of a generic wording: the line opens with an exception, a `name: ` lead or nothing,
# or has a bracketed logger/location, a source location, an upper-case level, a throw or a JSON record (a
# sentence's "Error messages like ..." is not an exception head)
_LOG_HEAD = re.compile(
    r"^\s*(?:[\w.:<>]*(?:Error|Exception|Failure|Fault)\b|[\w.]+:\s|[^\w`]*$)|what\(\):|terminate called|\[[^\]]*\]"
    r"|\bterminated with exception:|\b(?:[\w.]*Error|CUDA error|Cuda error):\s|^\s*(?:CUDA|Cuda|HIP) [Ee]rror\b"
    r"|[\w./\\-]+\.(?:cc|cpp|cu|cuh|c|h|hpp|py|go|rs|jl)[:(]\s*\d+|\b(?:ERROR|FATAL|CRITICAL|WARN\w*)\b|^\s*\{\""
    r"|^\s*thread '[^']*' panicked at '")  # a Rust panic (before 1.73) quotes its message


def has_log_structure(line: Line, start: int) -> bool:
    """A stripped log prefix, or log structure in front of `start` (`_LOG_HEAD`)."""
    return line.text != line.raw.rstrip("\r\n") or bool(_LOG_HEAD.search(line.text[:start]))

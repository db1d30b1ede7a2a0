"""`run --show-prompt N` (and `Classifier.show_prompt`): what the model gets for the first rows, from the very
token ids a job would send — the prefix and each question's suffix decoded, the cut between them, the
control tokens of the markup listed (a control string written in the content is text and is not among
them), and the label tokens whose logprobs are read. Tokenizer only: no weights load."""

from __future__ import annotations

from ...core import RowError
from .items import items
from .questions import QuestionSpec

CUT = "┆"  # printed where the shared prefix ends and a question's suffix begins


def _controls(prompter, ids) -> str:
    """The markup's control tokens in `ids`, in order (what the tokenizer reads as turns, not text); a run of
    one token (an image's tokens) as `token × n`."""
    names = [prompter.tok.convert_ids_to_tokens(i) for i in ids if i in prompter.text.control_ids]
    runs: list[list] = []
    for n in names:
        if runs and runs[-1][0] == n and n == _image_token(prompter):
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ", ".join(n if k == 1 else f"{n} × {k}" for n, k in runs) if runs else "none"


def _image_token(prompter) -> str | None:
    image_id = getattr(prompter, "image_id", None)
    return None if image_id is None else prompter.tok.convert_ids_to_tokens(image_id)


def _decode(prompter, rp) -> str:
    """The prefix decoded, each image's run of image tokens shown as one mark: which image, its size, and
    how many tokens the model reads for it."""
    tok = prompter.tok
    if not rp.images:
        return tok.decode(list(rp.prefix))
    image_id = prompter.image_id
    out, run, images, k = [], [], iter(rp.images), 0
    for i, t in enumerate(rp.prefix):
        if t != image_id:
            run.append(t)
            continue
        if i + 1 < len(rp.prefix) and rp.prefix[i + 1] == image_id:
            k += 1
            continue
        im = next(images)
        out.append(tok.decode(run) + f"⟦image {im.source} · {im.width}×{im.height} {im.format} · {k + 1} tokens⟧")
        run, k = [], 0
    return "".join(out) + tok.decode(run)


def render_rows(rows: list, prompter) -> str:
    """The rendered branches of `rows` (parsed rows and RowErrors) as text, one block per row."""
    tok = prompter.tok
    good = [r for r in rows if not isinstance(r, RowError)]
    built = dict(zip((r.pos for r in good), prompter.build_many(good), strict=True))
    out: list[str] = []
    for row in rows:
        if isinstance(row, RowError):
            name = f"row {row.id}" if row.id is not None else f"row at index {row.pos}"
            # the error already names its row (`row b: state: …`): said twice, it read `row b: row b: …`
            out.append(f"═══ {row.error if row.error.startswith(name + ':') else f'{name}: {row.error}'}")
            continue
        rp, fails = built[row.pos]
        # branch id → the question as that branch shows it (multi and debiased questions have several)
        specs = {
            it.bid: (q, it, f" item {k + 1}/{len(its)}" if len(its) > 1 else "")
            for q in row.questions
            if isinstance(q, QuestionSpec)
            for its in [items(q)]
            for k, it in enumerate(its)
        }
        if rp is None:
            out.append(f"═══ row {row.id}: no question can be asked")
        else:
            images = ""
            if rp.images:
                n = sum(1 for i in rp.prefix if i == prompter.image_id)
                images = f" ({n:,} of them for {len(rp.images)} image(s), each marked ⟦image …⟧)"
            out.append(
                f"═══ row {row.id} · prefix {len(rp.prefix):,} tokens{images}, shared by its {len(rp.branches)} "
                f"branch(es) · {CUT} marks where each branch's suffix starts"
            )
            out.append(_decode(prompter, rp) + CUT)
            out.append(f"    control tokens of the prefix: {_controls(prompter, rp.prefix)}")
            for b in rp.branches:
                q, it, which = specs[b.qid]
                out.append(
                    f"─── {q.qid}{which} ({q.type}) · suffix {len(b.suffix):,} tokens · branch "
                    f"{len(rp.prefix) + len(b.suffix):,} tokens"
                )
                out.append(CUT + tok.decode(list(b.suffix)))
                out.append(f"    control tokens of the suffix: {_controls(prompter, b.suffix)}")
                labels = " · ".join(
                    f"{tok.decode([i])!r} id {i} → {name}"
                    for i, name in zip(b.label_ids, it.shown.options, strict=True)
                )
                out.append(f"    label tokens (the next token, its logprob read as the answer): {labels}")
        out.extend(f"    ✗ {f.qid}: {f.error}" for f in fails)
    return "\n".join(out) + "\n"

"""The per-corpus results table: corpus and vocabulary statistics, the oracle, and every model run."""
from __future__ import annotations

import pandas as pd

from .errors import atomic_write, read_json

PPL_COLUMNS = ["model", "arch", "impl", "n_step", "layers", "regime", "seed",
               "valid_ppl", "test_ppl", "valid_tokens", "test_tokens", "params"]


def ppl_table(oracle_path: str | None, metrics_paths: list[str]) -> pd.DataFrame:
    rows = []
    if oracle_path:
        o = read_json(oracle_path)
        rows.append({"model": "oracle", "arch": "oracle", "valid_ppl": o["valid"]["ppl"], "test_ppl": o["test"]["ppl"],
                     "valid_tokens": o["valid"]["tokens"], "test_tokens": o["test"]["tokens"]})
    for p in metrics_paths:
        m = read_json(p)
        rows.append({"model": m["name"], **{k: m[k] for k in ("arch", "impl", "n_step", "layers", "regime", "seed")},
                     "valid_ppl": m["valid"]["ppl"], "test_ppl": m["test"]["ppl"],
                     "valid_tokens": m["valid"]["tokens"], "test_tokens": m["test"]["tokens"],
                     "params": m.get("params")})
    table = pd.DataFrame(rows, columns=PPL_COLUMNS)
    for col in ("n_step", "layers", "seed", "valid_tokens", "test_tokens", "params"):
        table[col] = table[col].astype("Int64")  # integers, with a blank where a row has none
    return table


def stats_table(corpus_stats_path: str, vocab_report_path: str) -> pd.DataFrame:
    cs = read_json(corpus_stats_path)
    vr = read_json(vocab_report_path)
    rows = []
    for split, s in cs["splits"].items():
        oov = vr["splits"].get(split, {})
        rows.append({"split": split, "sentences": s["sentences"], "tokens": s["tokens"],
                     "counted_tokens": s["tokens"] + s["sentences"], "types": s["types"],
                     "oov_tokens": oov.get("oov_tokens", 0), "oov_rate": oov.get("oov_rate", 0.0)})
    df = pd.DataFrame(rows)
    df.attrs["vocab_size"] = vr["vocab_size"]
    return df


def write(corpus: str, corpus_stats_path: str, vocab_report_path: str, oracle_path: str | None,
          metrics_paths: list[str], csv_out: str, md_out: str, html_out: str | None = None) -> pd.DataFrame:
    stats = stats_table(corpus_stats_path, vocab_report_path)
    table = ppl_table(oracle_path, metrics_paths)
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.4f")
    md = [f"# Results: {corpus}", "",
          f"Vocabulary: {stats.attrs['vocab_size']} entries (4 specials included).", "",
          stats.to_markdown(index=False, floatfmt=".4f"), "",
          "Perplexity counts every word and one `</s>` per sentence; `<s>` is never counted.", "",
          table.drop(columns=["arch", "impl"]).astype(object).where(table.notna().drop(columns=["arch", "impl"]), "")
          .to_markdown(index=False, floatfmt=".2f") if len(table) else "(no models)",
          ""]
    with atomic_write(md_out) as fh:
        fh.write("\n".join(md))
    if html_out:
        from .aggregate.tables import html_page

        # Fixed table ids (Styler draws random ones): the page is the same from run to run.
        ppl = table.drop(columns=["arch", "impl"]).style.set_uuid("ppl").format(precision=2, na_rep="").hide(axis="index")
        body = [f"<p>Vocabulary: {stats.attrs['vocab_size']} entries (4 specials included).</p>",
                stats.style.set_uuid("corpus").format(precision=4, na_rep="").hide(axis="index").set_caption("Corpus").to_html(),
                ppl.set_caption("Perplexity of every model (every word and one &lt;/s&gt; per sentence; never "
                                "&lt;s&gt;)").to_html()]
        with atomic_write(html_out) as fh:
            fh.write(html_page(f"Results: {corpus}", body))
    return table


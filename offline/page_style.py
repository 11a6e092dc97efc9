"""The look shared by spanscore's HTML pages (`report -o`, `agree -o`): one inline style
sheet, so every page is a single file that opens offline, and how long names wrap."""

import re
from html import escape


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity after each / _ - . : so a long id wraps at its parts."""
    return "".join(
        escape(part) + ("<wbr>" if re.fullmatch(r"[/_\-.:]", part) else "") for part in re.split(r"([/_\-.:])", text)
    )


STYLE = """
:root{--fg:#111827;--muted:#6b7280;--line:#e5e7eb;--pass:#059669;--fail:#dc2626}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:#f9fafb}main{max-width:1180px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px}h3{font-size:13px;margin:0;
color:var(--muted);font-weight:600;text-transform:uppercase;letter-spacing:.03em}
.meta,.note{color:var(--muted);font-size:12px}.warn{color:var(--fail)}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin:16px 0}.card{background:#fff;border:1px solid var(--line);
border-radius:8px;padding:14px 16px;min-width:240px;flex:1}.card p{margin:4px 0}.big{font-size:30px;font-weight:700;
font-variant-numeric:tabular-nums}.range b{font-variant-numeric:tabular-nums;white-space:nowrap}.defines{font-size:12px;
border-top:1px solid var(--line);padding-top:6px;margin-top:8px!important}
.facts{line-height:1.9}.charts{display:flex;gap:14px;flex-wrap:wrap}figure{background:#fff;border:1px solid var(--line);
border-radius:8px;padding:12px;margin:0;flex:1;min-width:300px}figure svg{max-width:100%;height:auto}
.charts figure{flex-basis:440px}
figcaption{font-weight:600;margin-bottom:6px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(280px,1fr));
gap:12px}figure.small{min-width:0}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid var(--line);font-size:13px}
th,td{padding:6px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#f3f4f6;cursor:pointer;user-select:none;vertical-align:bottom}
td.num{white-space:nowrap}th.num{text-align:right}.cases th:not(:first-child){width:1%;text-align:right}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.case{cursor:pointer}tr.case:hover{background:#f3f4f6}
td.case-id{overflow-wrap:anywhere;min-width:10em}tr.case.fail td:first-child{border-left:3px solid var(--fail)}
tr.case.pass td:first-child{border-left:3px solid var(--pass)}
button.open{border:0;background:none;cursor:pointer;font-size:12px;padding:0 4px}
.detail-body{display:flex;gap:16px;flex-wrap:wrap}.detail-body figure{flex:0 0 auto;border:0;padding:0}
.failures{flex:1;min-width:320px;max-height:420px;overflow:auto}.failure{border-left:3px solid var(--fail);
padding:2px 10px;margin:0 0 10px}.failure ul{margin:4px 0;padding-left:18px}.failure li{margin:4px 0;
overflow-wrap:anywhere}code{font-size:12px;background:#f3f4f6;padding:1px 4px;border-radius:3px}
.groups td,.groups th{cursor:default}.groups td.name{overflow-wrap:anywhere}.scroll{overflow-x:auto}
.defines code{white-space:nowrap}
"""

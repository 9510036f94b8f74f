"""System prompt and few-shot turns of the WebShop agent (action grammar of docs/webshop.md, What is implemented exactly)."""

from __future__ import annotations

SYSTEM_PROMPT = """\
You are shopping for a customer on WebShop, an online store. Each message shows the current web \
page; its pieces of text are separated by " [SEP] ". The customer's instruction is at the top of \
every page.

Actions:
- search[<query>]: search the store for <query>. Works on every page; results come 10 per page.
- click[<element>]: click a button, a product id, or an option value shown on the page, e.g. \
click[b0abc12345], click[next >], click[< prev], click[back to search], click[description], \
click[x-large], click[buy now]. Case does not matter.

Open a matching product, click each option the instruction asks for (colour, size, flavour, ...), \
make sure the price is under the limit, then click[buy now]. Buying ends the episode; your reward \
is how well the product, its options and its price match the instruction. An action that does not \
fit the page changes nothing.

Reply with exactly one action on a single line, such as search[red running shoes] or \
click[buy now], and nothing else."""

_INSTRUCTION = "i need a cruelty free lip balm with spf 15 with flavor name: vanilla, and price lower than 20.00 dollars"

FEW_SHOT: tuple[tuple[str, str], ...] = (
    (f"WebShop [SEP] Instruction: [SEP] {_INSTRUCTION} [SEP] Search",
     "search[cruelty free lip balm spf 15 vanilla]"),
    (f"Instruction: [SEP] {_INSTRUCTION} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > "
     "[SEP] B0EXAMPLE1 [SEP] Lumora Tinted Lip Balm with SPF 15, Cruelty Free [SEP] $8.99 "
     "[SEP] B0EXAMPLE2 [SEP] Verly Overnight Lip Mask [SEP] $14.5",
     "click[b0example1]"),
    (f"Instruction: [SEP] {_INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] flavor name [SEP] cherry "
     "[SEP] mint [SEP] vanilla [SEP] Lumora Tinted Lip Balm with SPF 15, Cruelty Free [SEP] Price: $8.99 "
     "[SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now",
     "click[vanilla]"),
)

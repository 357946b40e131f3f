// What every part of the grid builds with: an element, and a head's name as Python spells it (mha_viz/names.py,
// sent in the payload's `names`).

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function headName(s, l, h) { return s.d.names.heads[l][h]; }

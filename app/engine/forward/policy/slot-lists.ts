// The slot lists a row policy hands a placement: its per-KV-head selection with the current slot
// appended, packed flat for the native attendSlots kernel (native/index.d.ts).

/** Flat per-KV-head lists for attendSlots, each with the current slot N appended: slots, offsets [kvHeads + 1]. */
export function packSlotLists(lists: readonly Int32Array[], N: number): { slots: Int32Array; offsets: Int32Array } {
  const offsets = new Int32Array(lists.length + 1);
  let total = 0;
  for (let g = 0; g < lists.length; g++) {
    total += lists[g]!.length + 1;
    offsets[g + 1] = total;
  }
  const slots = new Int32Array(total);
  for (let g = 0; g < lists.length; g++) {
    slots.set(lists[g]!, offsets[g]!);
    slots[offsets[g + 1]! - 1] = N;
  }
  return { slots, offsets };
}

// The row policies the engine runs, for the renderer's menus. The renderer may import only types
// from app/common, so the list is restated here as a record over the protocol's KvPolicy type: a
// policy added to the protocol and not here (or the reverse) fails the type check.
import type { KvPolicy } from '../../../app/common/protocol.ts';

const EVERY_POLICY: Record<KvPolicy, true> = { full: true, infinigen: true, h2o: true, streaming: true, quest: true, snapkv: true, oracle: true, window: true };

/** Every policy, in the protocol's order. */
export const POLICIES = Object.keys(EVERY_POLICY) as KvPolicy[];

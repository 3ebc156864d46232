/**
 * @module inspection/combine
 * `combineInspectors`: one XState inspection observer that feeds several (the local inspector page
 * and Stately's relay, say). A failing observer never stops the others, nor the actors.
 */
import type { InspectionEvent, Observer } from 'xstate';

export type InspectionObserver = Observer<InspectionEvent> | ((event: InspectionEvent) => void);

/**
 * Forwards every inspection event to each observer, in order.
 *
 * @example
 * const core = await createCore({ storage, model, inspect: combineInspectors(tracker.inspect, stately.inspect) });
 */
export function combineInspectors(...observers: Array<InspectionObserver | undefined | null>): Observer<InspectionEvent> {
  const targets = observers.filter((o): o is InspectionObserver => o !== undefined && o !== null);
  return {
    next(event) {
      for (const target of targets) {
        try {
          if (typeof target === 'function') target(event);
          else target.next?.(event);
        } catch {
          // Inspection is best effort: one broken observer must not starve the others or the actors.
        }
      }
    },
  };
}

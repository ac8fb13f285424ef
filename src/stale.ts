/**
 * The mark on a code cell the agent edited and nobody has run since: its outputs were made by the source before.
 * The kernel says so in the cell's metadata (`agentkernel.source_changed`) and `replace` clears the execution count;
 * the mark is shown while both hold (running the cell sets a count, and the mark goes), and survives a reload.
 */

import type { ISharedCodeCell } from '@jupyter/ydoc';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { JSONObject } from '@lumino/coreutils';

/** The class of a marked cell's widget (style/base.css draws it). */
export const STALE_CLASS = 'jp-agentkernel-stale';
const TITLE = 'edited by agentkernel';

/** Whether a cell is marked: a code cell whose `metadata.agentkernel` says the agent changed its source, not run
 * since (no execution count). */
export function isStale(cellType: string, agentkernel: unknown, count: unknown): boolean {
  const meta = agentkernel as { source_changed?: unknown } | null | undefined;
  return cellType === 'code' && count === null && meta?.source_changed === true;
}

/** Keep the mark of every cell of `panel` up to date as cells come and go and their metadata and counts change. */
export function watchStale(panel: NotebookPanel): void {
  const notebook = panel.content;
  const watched = new WeakSet<object>();

  const mark = (model: object) => {
    const cell = notebook.widgets.find(widget => widget.model === model);
    if (!cell) {
      return;
    }
    const meta = cell.model.getMetadata('agentkernel') as JSONObject | undefined;
    const count = cell.model.type === 'code' ? (cell.model.sharedModel as ISharedCodeCell).execution_count : null;
    const stale = isStale(cell.model.type, meta, count ?? null);
    cell.toggleClass(STALE_CLASS, stale);
    const prompt = cell.promptNode;
    if (prompt && (stale || prompt.title.startsWith(TITLE))) {
      prompt.title = stale ? `${TITLE} (run ${meta?.run_id}): its outputs were made by the source before` : '';
    }
  };

  const scan = () => {
    for (const cell of notebook.widgets) {
      const model = cell.model;
      if (!watched.has(model)) {
        watched.add(model);
        model.sharedModel.changed.connect(() => mark(model));
      }
      mark(model);
    }
  };

  void panel.context.ready.then(() => {
    notebook.model?.cells.changed.connect(scan);
    scan();
  });
}

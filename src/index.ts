/**
 * agentkernel's front end for JupyterLab 4 and Notebook 7: the notebook's cells over a comm, for the `%%agent`
 * kernel. It does only what the kernel asks; it never executes a cell.
 *
 * Protocol (comm target `agentkernel.notebook`; docs/notebook-protocol.md says the same with examples):
 *
 * - THE KERNEL OPENS the comm: `Comm(target_name="agentkernel.notebook", data=<first request>)`. This plugin
 *   registers the target on the kernel of every notebook panel (and again when a panel's kernel changes), so the
 *   panel whose kernel opened the comm answers. The open message's data is a request like any other.
 * - Every kernel -> front-end message is a request `{"request_id": str, "op": str, ...}`; the front end answers each
 *   with one message on the same comm, `{"request_id": <same>, "ok": true, ...}`, or on failure
 *   `{"request_id": <same>, "ok": false, "reason": "missing" | "changed" | "error", "error": <human text>}`.
 * - Ops:
 *   - `hello` -> `{"front_end": "jupyterlab" | "notebook7", "version": <this extension's version>,
 *     "can_edit": bool}`.
 *   - `read` -> `{"path": <notebook path relative to the server root>, "active_cell_id": str | null,
 *     "cells": [{"id", "cell_type", "source", "execution_count": int | null, "has_error": bool,
 *     "outputs_text": str (at most 2000 characters), "metadata_agentkernel": object | null, "tags": [str]}, ...]}`:
 *     every cell in order, by nbformat 4.5 id.
 *   - `insert` `{"after": cell_id, "cell_type": "code" | "markdown", "source": str, "metadata": {...}}` ->
 *     `{"cell_id": <new id>, "index": int}`; `missing` if `after` is no cell. Nothing runs, the user's active cell
 *     stays where it is.
 *   - `replace` `{"cell_id": id, "expected_source": str, "source": str, "metadata": {...}, "stale": bool}` ->
 *     `{"old_source": str, "old_execution_count": int | null, "old_metadata": {<key>: <old value> | null}}`;
 *     `missing` if no such cell, `changed` (with the cell's current `"source"`) if its source is not
 *     `expected_source`. The edit is one undoable step of that cell (one Ctrl-Z restores the old source); the
 *     top-level keys of `metadata` (`agentkernel`) are set in the cell's metadata and, unless `stale` is false, its
 *     execution count is cleared (its outputs were made by the old source) in the same step.
 *   - `restore` `{"cells": [{"cell_id", "expected_source": <what the run wrote>, "source": <the source before> |
 *     null (the run added the cell), "execution_count": int | null, "metadata": {<key>: value | null}}, ...]}` ->
 *     `{"removed": [id], "restored": [id], "changed": [{"cell_id", "source"}], "missing": [id]}`: an agent run's
 *     changes taken back at once; a cell whose source is not `expected_source` (the user changed it) is left alone.
 *
 * It also renders the Undo button of a run's record (undo.ts), which asks the kernel to run `%agent_undo RUN_ID`, and
 * marks the code cells the agent edited that have not run since (stale.ts).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { JSONObject } from '@lumino/coreutils';

import { NotebookAnswerer, Refusal } from './answerer';
import { watchStale } from './stale';
import { UNDO_MIME, undoRendererFactory } from './undo';

export { OUTPUTS_TEXT_LIMIT, cellTags, outputsText, sourceEdit } from './answerer';

/** The comm target the kernel opens. */
export const COMM_TARGET = 'agentkernel.notebook';

function reply(comm: Kernel.IComm, request: JSONObject, answer: () => JSONObject): void {
  let body: JSONObject;
  try {
    body = { ok: true, ...answer() };
  } catch (error) {
    body =
      error instanceof Refusal
        ? { ...error.extra, ok: false, reason: error.reason, error: error.message }
        : { ok: false, reason: 'error', error: `${error}` };
  }
  comm.send({ request_id: (request.request_id as string | undefined) ?? null, ...body });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'agentkernel:notebook',
  description:
    'The notebook cells, for the %%agent kernel: read them, insert cells, replace a cell source, undo a run.',
  autoStart: true,
  requires: [INotebookTracker, IRenderMimeRegistry],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, rendermime: IRenderMimeRegistry) => {
    const frontEnd = app.name === 'Jupyter Notebook' ? 'notebook7' : 'jupyterlab';

    /** The panel a kernel belongs to (the current one first: two views of a notebook share one model). */
    const panelOf = (kernel: Kernel.IKernelConnection): NotebookPanel | undefined => {
      const owns = (panel: NotebookPanel) => panel.sessionContext.session?.kernel === kernel;
      const current = tracker.currentWidget;
      return current && owns(current) ? current : tracker.find(owns);
    };

    const opened = (kernel: Kernel.IKernelConnection) => (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg) => {
      const answer = (request: JSONObject) =>
        reply(comm, request, () => {
          const panel = panelOf(kernel);
          if (!panel) {
            throw new Refusal('error', 'no notebook panel has this kernel');
          }
          return new NotebookAnswerer(panel, frontEnd).handle(request);
        });
      comm.onMsg = message => answer(message.content.data);
      answer(msg.content.data);
    };

    const registered = new WeakSet<Kernel.IKernelConnection>();
    const register = (panel: NotebookPanel) => {
      const kernel = panel.sessionContext.session?.kernel;
      if (kernel && !registered.has(kernel)) {
        // The registry survives kernel restarts; a new kernel (changed or reconnected) is a new connection.
        kernel.registerCommTarget(COMM_TARGET, opened(kernel));
        registered.add(kernel);
      }
    };
    const watch = (panel: NotebookPanel) => {
      panel.sessionContext.kernelChanged.connect(() => register(panel));
      register(panel);
      watchStale(panel);
    };
    tracker.forEach(watch);
    tracker.widgetAdded.connect((_, panel) => watch(panel));

    // The record's Undo button: in the app's registry (cloned by every notebook opened from now on) and in the
    // notebooks already open.
    const kernelOf = (node: HTMLElement) =>
      tracker.find(panel => panel.node.contains(node))?.sessionContext.session?.kernel;
    const undo = undoRendererFactory(kernelOf);
    rendermime.addFactory(undo);
    tracker.forEach(panel => {
      if (!panel.content.rendermime.mimeTypes.includes(UNDO_MIME)) {
        panel.content.rendermime.addFactory(undo);
      }
    });
  }
};

export default plugin;

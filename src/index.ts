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
 *   - `replace` `{"cell_id": id, "expected_source": str, "source": str, "metadata": {...}}` ->
 *     `{"old_source": str}`; `missing` if no such cell, `changed` (with the cell's current `"source"`) if its source
 *     is not `expected_source`. The edit is one undoable step of that cell (one Ctrl-Z restores the old source);
 *     the top-level keys of `metadata` (`agentkernel`) are merged into the cell's metadata in the same step.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type * as nbformat from '@jupyterlab/nbformat';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { JSONObject, PartialJSONValue } from '@lumino/coreutils';

// The bundler (webpack / rspack) resolves this at build time; TypeScript is told only that it exists.
declare const require: (id: string) => { version: string };
const VERSION: string = require('../package.json').version;

/** The comm target the kernel opens. */
export const COMM_TARGET = 'agentkernel.notebook';
/** The most characters of a cell's outputs `read` returns. */
export const OUTPUTS_TEXT_LIMIT = 2000;

type Reason = 'missing' | 'changed' | 'error';

/** A refusal that carries its reason (and any extra fields, such as the current source) to the reply. */
class Refusal extends Error {
  constructor(
    readonly reason: Reason,
    message: string,
    readonly extra: JSONObject = {}
  ) {
    super(message);
  }
}

/** What the cells' shared models also have (YBaseCell), though ISharedCell does not declare it. */
interface IUndoable {
  undoManager?: { stopCapturing(): void } | null;
}

/** A cell's `metadata.tags` as nbformat has them: the strings of a list, else none. */
export function cellTags(tags: unknown): string[] {
  return Array.isArray(tags) ? tags.filter((tag): tag is string => typeof tag === 'string') : [];
}

/** A short text of a cell's outputs: stream text, text/plain of results and displays, `ename: evalue` of errors. */
export function outputsText(outputs: nbformat.IOutput[]): string {
  const parts: string[] = [];
  for (const output of outputs) {
    if (output.output_type === 'stream') {
      parts.push(joined((output as nbformat.IStream).text));
    } else if (output.output_type === 'error') {
      const error = output as nbformat.IError;
      parts.push(`${error.ename}: ${error.evalue}\n`);
    } else if (output.output_type === 'execute_result' || output.output_type === 'display_data') {
      const plain = (output as nbformat.IDisplayData).data?.['text/plain'];
      if (plain !== undefined) {
        parts.push(joined(plain as nbformat.MultilineString) + '\n');
      }
    }
  }
  const text = parts.join('');
  return text.length <= OUTPUTS_TEXT_LIMIT ? text : text.slice(0, OUTPUTS_TEXT_LIMIT - 1) + '…';
}

function joined(text: nbformat.MultilineString): string {
  return Array.isArray(text) ? text.join('') : text;
}

/** The shortest single replacement turning `before` into `after`: [start, end of the old text, new text]. */
export function sourceEdit(before: string, after: string): [number, number, string] {
  let start = 0;
  const most = Math.min(before.length, after.length);
  while (start < most && before[start] === after[start]) {
    start++;
  }
  let tail = 0;
  while (tail < most - start && before[before.length - 1 - tail] === after[after.length - 1 - tail]) {
    tail++;
  }
  // Never split a surrogate pair.
  if (start > 0 && isLowSurrogate(before.charCodeAt(start))) {
    start--;
  }
  if (tail > 0 && isLowSurrogate(before.charCodeAt(before.length - tail))) {
    tail--;
  }
  return [start, before.length - tail, after.slice(start, after.length - tail)];
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/** Answers the kernel's requests for one notebook panel. */
class NotebookAnswerer {
  constructor(
    private readonly panel: NotebookPanel,
    private readonly frontEnd: string
  ) {}

  handle(request: JSONObject): JSONObject {
    switch (request.op) {
      case 'hello':
        return { front_end: this.frontEnd, version: VERSION, can_edit: !this.readOnly };
      case 'read':
        return this.read();
      case 'insert':
        return this.insert(request);
      case 'replace':
        return this.replace(request);
      default:
        throw new Refusal('error', `unknown op ${JSON.stringify(request.op ?? null)}`);
    }
  }

  private get model() {
    const model = this.panel.content.model;
    if (!model) {
      throw new Refusal('error', 'the notebook is not loaded');
    }
    return model;
  }

  private get readOnly(): boolean {
    return !!this.panel.content.model?.readOnly;
  }

  private read(): JSONObject {
    const cells = this.model.sharedModel.cells.map(cell => {
      const json = cell.toJSON() as nbformat.ICell;
      const outputs = (json.outputs as nbformat.IOutput[] | undefined) ?? [];
      const count = json.execution_count;
      return {
        id: cell.getId(),
        cell_type: cell.cell_type,
        source: cell.getSource(),
        execution_count: typeof count === 'number' ? count : null,
        has_error: outputs.some(output => output.output_type === 'error'),
        outputs_text: outputsText(outputs),
        metadata_agentkernel: (cell.getMetadata('agentkernel') as JSONObject | undefined) ?? null,
        tags: cellTags(cell.getMetadata('tags'))
      };
    });
    return {
      path: this.panel.context.localPath,
      active_cell_id: this.panel.content.activeCell?.model.id ?? null,
      cells
    };
  }

  private indexOf(id: unknown): number {
    const index = this.model.sharedModel.cells.findIndex(cell => cell.getId() === id);
    if (index < 0) {
      throw new Refusal('missing', `no cell with id ${JSON.stringify(id ?? null)} in ${this.panel.context.localPath}`);
    }
    return index;
  }

  private writable(): void {
    if (this.readOnly) {
      throw new Refusal('error', `${this.panel.context.localPath} is read-only`);
    }
  }

  private insert(request: JSONObject): JSONObject {
    const index = this.indexOf(request.after) + 1;
    this.writable();
    const cellType = request.cell_type ?? 'code';
    if (cellType !== 'code' && cellType !== 'markdown') {
      throw new Refusal('error', `cell_type must be "code" or "markdown", not ${JSON.stringify(cellType)}`);
    }
    const source = String(request.source ?? '');
    const metadata = (request.metadata as JSONObject | undefined) ?? {};
    // Inserting into the shared model leaves the user's active cell (kept by id), focus and scroll alone.
    const cell = this.model.sharedModel.insertCell(
      index,
      cellType === 'code'
        ? { cell_type: 'code', source, metadata, outputs: [], execution_count: null }
        : { cell_type: 'markdown', source, metadata }
    );
    return { cell_id: cell.getId(), index };
  }

  private replace(request: JSONObject): JSONObject {
    const cell = this.model.sharedModel.cells[this.indexOf(request.cell_id)];
    const current = cell.getSource();
    if (current !== request.expected_source) {
      throw new Refusal('changed', 'the cell changed since it was read', { source: current });
    }
    this.writable();
    const source = String(request.source ?? '');
    const metadata = (request.metadata as JSONObject | undefined) ?? {};
    const [start, end, text] = sourceEdit(current, source);
    // One step of the cell's undo stack: nothing typed before or after merges into it (the undo manager groups
    // changes made within half a second), and the metadata goes in the same transaction.
    const undo = (cell as unknown as IUndoable).undoManager;
    undo?.stopCapturing();
    cell.transact(() => {
      if (start !== end || text) {
        cell.updateSource(start, end, text);
      }
      for (const [key, value] of Object.entries(metadata)) {
        cell.setMetadata(key, value as PartialJSONValue);
      }
    });
    undo?.stopCapturing();
    return { old_source: current };
  }
}

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
  description: 'The notebook cells, for the %%agent kernel: read them, insert cells, replace a cell source.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
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
    };
    tracker.forEach(watch);
    tracker.widgetAdded.connect((_, panel) => watch(panel));
  }
};

export default plugin;

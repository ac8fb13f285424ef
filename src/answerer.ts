/**
 * The answers to the kernel's requests for one notebook panel: read the cells, insert a cell, replace a cell's
 * source, restore the cells a run changed. The protocol is described in index.ts and docs/notebook-protocol.md.
 */

import type { ISharedCell, ISharedCodeCell } from '@jupyter/ydoc';
import type * as nbformat from '@jupyterlab/nbformat';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { JSONObject, PartialJSONValue } from '@lumino/coreutils';

// The bundler (webpack / rspack) resolves this at build time; TypeScript is told only that it exists.
declare const require: (id: string) => { version: string };
const VERSION: string = require('../package.json').version;

/** The most characters of a cell's outputs `read` returns. */
export const OUTPUTS_TEXT_LIMIT = 2000;

type Reason = 'missing' | 'changed' | 'error';

/** A refusal that carries its reason (and any extra fields, such as the current source) to the reply. */
export class Refusal extends Error {
  constructor(
    readonly reason: Reason,
    message: string,
    readonly extra: JSONObject = {}
  ) {
    super(message);
  }
}

/** What the shared models also have (YBaseCell, YNotebook), though their interfaces do not declare it. */
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

/** The execution count of a code cell (null for other cells and cells not run). */
function executionCount(cell: ISharedCell): number | null {
  const count = cell.cell_type === 'code' ? (cell as ISharedCodeCell).execution_count : null;
  return typeof count === 'number' ? count : null;
}

/** Give `cell` a new source, set (or, for null, delete) the top-level metadata keys, and set its execution count. */
function rewrite(cell: ISharedCell, source: string, metadata: JSONObject, count: number | null): void {
  const [start, end, text] = sourceEdit(cell.getSource(), source);
  if (start !== end || text) {
    cell.updateSource(start, end, text);
  }
  for (const [key, value] of Object.entries(metadata)) {
    if (value === null) {
      cell.deleteMetadata(key);
    } else {
      cell.setMetadata(key, value as PartialJSONValue);
    }
  }
  if (cell.cell_type === 'code') {
    (cell as ISharedCodeCell).execution_count = count;
  }
}

/** Answers the kernel's requests for one notebook panel. */
export class NotebookAnswerer {
  constructor(
    private readonly panel: NotebookPanel,
    private readonly frontEnd: string
  ) {}

  handle(request: JSONObject): JSONObject {
    switch (request.op) {
      case 'hello':
        return {
          front_end: this.frontEnd,
          version: VERSION,
          can_edit: !this.readOnly,
          path: this.panel.context.localPath
        };
      case 'read':
        return this.read();
      case 'insert':
        return this.insert(request);
      case 'replace':
        return this.replace(request);
      case 'restore':
        return this.restore(request);
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
      return {
        id: cell.getId(),
        cell_type: cell.cell_type,
        source: cell.getSource(),
        execution_count: executionCount(cell),
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
    const metadata = (request.metadata as JSONObject | undefined) ?? {};
    const oldMetadata: JSONObject = {};
    for (const key of Object.keys(metadata)) {
      oldMetadata[key] = (cell.getMetadata(key) as JSONObject | undefined) ?? null;
    }
    const oldCount = executionCount(cell);
    // Its outputs were made by the old source: the cleared execution count says so ([ ]: beside them).
    const count = request.stale === false ? oldCount : null;
    this.steps([cell], () => cell.transact(() => rewrite(cell, String(request.source ?? ''), metadata, count)));
    return { old_source: current, old_execution_count: oldCount, old_metadata: oldMetadata };
  }

  /**
   * Put the cells a run changed back as they were: remove each cell it added, give each cell it edited its old
   * source (and metadata, and execution count if the cell has not run since). A cell whose source is no longer
   * what the run wrote (the user changed it) is left alone and listed. With document-wide undo it is one transaction
   * of the notebook (one undo step); otherwise each edit is one step of its cell's undo stack, as `replace` is.
   */
  private restore(request: JSONObject): JSONObject {
    const wanted = request.cells;
    if (!Array.isArray(wanted)) {
      throw new Refusal('error', '"cells" must be a list');
    }
    this.writable();
    const shared = this.model.sharedModel;
    const removed: string[] = [];
    const restored: string[] = [];
    const missing: string[] = [];
    const changed: JSONObject[] = [];
    const seen = new Set<string>();
    const removals: ISharedCell[] = [];
    const edits: [ISharedCell, JSONObject][] = [];
    for (const item of wanted as JSONObject[]) {
      const id = String(item?.cell_id ?? '');
      if (seen.has(id)) {
        continue;
      }
      seen.add(id);
      const cell = shared.cells.find(c => c.getId() === id);
      if (!cell) {
        missing.push(id);
      } else if (cell.getSource() !== item.expected_source) {
        changed.push({ cell_id: id, source: cell.getSource() });
      } else if (typeof item.source === 'string') {
        edits.push([cell, item]);
        restored.push(id);
      } else {
        removals.push(cell);
        removed.push(id);
      }
    }
    const change = () => {
      for (const [cell, item] of edits) {
        // Not run since the run's edit: the outputs are the old source's again. Run since: they are the run's.
        const count = executionCount(cell) === null ? ((item.execution_count as number | null) ?? null) : null;
        const metadata = (item.metadata as JSONObject | undefined) ?? {};
        // The cell's own transaction, so that its undo stack (if it has its own) holds this step
        cell.transact(() => rewrite(cell, item.source as string, metadata, count));
      }
      for (const cell of removals) {
        shared.deleteCell(shared.cells.indexOf(cell));
      }
    };
    this.steps(
      edits.map(([cell]) => cell),
      shared.disableDocumentWideUndoRedo ? change : () => shared.transact(change)
    );
    return { removed, restored, changed, missing };
  }

  /** Run `change` as one step of each undo stack it touches: nothing the user types just before or after merges
   * into it (the undo managers group changes made within half a second). */
  private steps(cells: ISharedCell[], change: () => void): void {
    const managers = new Set<{ stopCapturing(): void }>();
    for (const model of [this.model.sharedModel, ...cells]) {
      const manager = (model as unknown as IUndoable).undoManager;
      if (manager) {
        managers.add(manager);
      }
    }
    managers.forEach(manager => manager.stopCapturing());
    change();
    managers.forEach(manager => manager.stopCapturing());
  }
}

/**
 * The Undo button of a finished run's record: a renderer of `application/vnd.agentkernel.undo+json`
 * (`{"cells": int, "variables"?: int}`, the run's id in the output's metadata: `{"run_id": str}` under the same
 * type), an output the kernel shows below a run that changed the notebook or the kernel's variables.
 *
 * A click runs `%agent_undo RUN_ID` in the notebook's kernel as a silent execute request (no execution count, no
 * output in any cell) and shows the one line it prints beside the button. The kernel does the undo: it asks this
 * extension, over the `agentkernel.notebook` comm, to `restore` the cells the run changed, and takes back its
 * variables itself. Where the extension is not
 * installed the output's text/plain says how to undo (`%agent_undo`, the newest run; `_agent.run_id` names it).
 */

import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { IRenderMime } from '@jupyterlab/rendermime';
import type { JSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

/** The MIME type of the Undo button's output. */
export const UNDO_MIME = 'application/vnd.agentkernel.undo+json';
/** What a run id looks like (the kernel's are 12 hex digits): nothing else is put into the code the button runs. */
const RUN_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Finds the kernel of the notebook that shows a node. */
export type KernelOf = (node: HTMLElement) => Kernel.IKernelConnection | null | undefined;

/** The Undo button and the line that says what the undo did. */
export class UndoButton extends Widget implements IRenderMime.IRenderer {
  private readonly button = document.createElement('button');
  private readonly line = document.createElement('span');
  private runId = '';

  constructor(private readonly kernelOf: KernelOf) {
    super();
    this.addClass('jp-agentkernel-undo');
    this.button.className = 'jp-mod-styled jp-mod-warn';
    this.button.textContent = 'Undo this run';
    this.button.onclick = () => void this.undo();
    this.line.className = 'jp-agentkernel-undo-line';
    this.node.append(this.button, this.line);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = (model.data[UNDO_MIME] ?? {}) as JSONObject;
    // The run's id is in the output's metadata (nbval compares data, and a re-run's id is new); notebooks saved
    // before 0.7 keep it in the data.
    const metadata = (model.metadata[UNDO_MIME] ?? {}) as JSONObject;
    const runId = String(metadata.run_id ?? data.run_id ?? '');
    this.runId = RUN_ID.test(runId) ? runId : '';
    this.button.disabled = !this.runId;
    this.button.title = this.runId ? `%agent_undo ${this.runId}` : 'this output names no run';
    this.line.textContent = `run ${this.runId} changed ${changedLine(data)}`;
  }

  private async undo(): Promise<void> {
    const kernel = this.kernelOf(this.node);
    if (!kernel) {
      this.line.textContent = 'no kernel: the run can be undone only while the kernel that made it runs';
      return;
    }
    this.button.disabled = true;
    this.line.textContent = 'undoing…';
    const said: string[] = [];
    try {
      const future = kernel.requestExecute({
        code: `%agent_undo ${this.runId}`,
        silent: true,
        store_history: false,
        allow_stdin: false,
        stop_on_error: false
      });
      future.onIOPub = (msg: KernelMessage.IIOPubMessage) => {
        if (msg.header.msg_type === 'stream') {
          said.push((msg.content as KernelMessage.IStreamMsg['content']).text);
        } else if (msg.header.msg_type === 'error') {
          const error = msg.content as KernelMessage.IErrorMsg['content'];
          said.push(`${error.ename}: ${error.evalue}`);
        }
      };
      await future.done;
    } catch (error) {
      said.push(`${error}`);
    }
    const text = undoLine(said.join('').trim(), this.runId);
    this.line.textContent = text;
    // Undone (or nothing left to undo): done. Anything else (cells the user changed, no kernel run): try again later.
    this.button.disabled = /^(undid run|nothing left)/.test(text);
  }
}

/** What a run changed, as its Undo output counts it: `3 cells and 2 variables` (numbers only: anything else is
 * counted as none). */
export function changedLine(data: JSONObject): string {
  const count = (value: unknown) => (typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : 0);
  const cells = count(data.cells);
  const variables = count(data.variables);
  const parts = [`${cells} cell${cells === 1 ? '' : 's'}`];
  if (variables) {
    parts.push(`${variables} variable${variables === 1 ? '' : 's'}`);
  }
  return parts.join(' and ');
}

/** The line shown beside the button for what the kernel `said`: IPython's raw error for a magic that is not there
 * (a kernel started after the run, which has not loaded agentkernel) becomes one line saying why nothing can be
 * undone. */
export function undoLine(said: string, runId: string): string {
  if (/UsageError: Line magic function `%agent_undo` not found/.test(said)) {
    return (
      `cannot undo run ${runId}: this kernel has no record of it (agentkernel is not loaded here: ` +
      'the kernel was restarted since the run, and a new kernel cannot take back an old run; ' +
      '%load_ext agentkernel loads it for new runs)'
    );
  }
  return said || 'the kernel said nothing';
}

/** The renderer factory registered for {@link UNDO_MIME}. Safe: it shows a run id it has checked, and a click only
 * runs `%agent_undo` with it (a kernel that did not make that run says so). */
export function undoRendererFactory(kernelOf: KernelOf): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [UNDO_MIME],
    defaultRank: 40,
    createRenderer: () => new UndoButton(kernelOf)
  };
}

/**
 * Which workflow a claim comes from, for the sidecar's delivery log.
 *
 * n8n 2.41 gives a node its workflow's id, name and active flag
 * (`getWorkflow()`: IWorkflowMetadata), and no version id: the version
 * that runs (IWorkflowBase.versionId / activeVersionId) is known to n8n's
 * execution layer, not to nodes. So the nodes send `workflow_id` (shared
 * by every version of the workflow) and never a `workflow_version`.
 */

/** The longest workflow_id the sidecar takes, in bytes (claim.MaxWorkflowFieldLen). */
export const MAX_WORKFLOW_FIELD_LENGTH = 128;

const PRINTABLE = /^[\x21-\x7e]+$/;

/**
 * The running workflow's id as the sidecar takes it (1 to 128 printable
 * ASCII characters, no spaces), or undefined when n8n gives none (an
 * unsaved workflow) or one the sidecar would refuse.
 */
export function workflowIdOf(context: { getWorkflow?: () => { id?: unknown } | undefined }): string | undefined {
	let id: unknown;
	try {
		id = typeof context.getWorkflow === 'function' ? context.getWorkflow()?.id : undefined;
	} catch {
		return undefined;
	}
	if (typeof id !== 'string' || id.length > MAX_WORKFLOW_FIELD_LENGTH || !PRINTABLE.test(id)) return undefined;
	return id;
}

// Posts the gpuhosts preview on a pull request as one comment that every later run edits in place.
// Called from actions/github-script (.github/workflows/preview.yml) with its `github`, `context` and `core`.
'use strict';

const MARKER = '<!-- gpuhosts-preview -->';
// GitHub refuses an issue comment body longer than 65,536 characters.
const COMMENT_LIMIT = 65536;
const DEFAULT_BOT = 'github-actions[bot]';

function withMarker(markdown) {
  return markdown.startsWith(MARKER + '\n') || markdown === MARKER ? markdown : `${MARKER}\n${markdown}`;
}

function fitComment(body, runUrl) {
  if (body.length <= COMMENT_LIMIT) return { body, truncated: false };
  const note = `\n\n…cut here: the preview is longer than a comment holds; the whole of it is in the job summary of ${runUrl}\n`;
  return { body: body.slice(0, COMMENT_LIMIT - note.length) + note, truncated: true };
}

// A human can type the marker too; only the workflow's own comment is ours to edit.
function isOurs(comment, botLogin) {
  const user = comment.user || {};
  return user.type === 'Bot' && user.login === botLogin && typeof comment.body === 'string' &&
    comment.body.split('\n', 1)[0].trim() === MARKER;
}

// A pull request from a fork runs with a read-only token (so does one whose head repository was deleted).
function fromFork(context) {
  const head = context.payload.pull_request && context.payload.pull_request.head;
  const headRepo = head && head.repo && head.repo.full_name;
  return headRepo !== `${context.repo.owner}/${context.repo.repo}`;
}

function isReadOnlyTokenError(error) {
  return Boolean(error) && (error.status === 403 ||
    /Resource not accessible by integration/.test(String(error.message)));
}

async function toSummary(core, body, why) {
  core.notice(`gpuhosts preview written to the job summary: ${why}`);
  await core.summary.addRaw(body).write();
  return { action: 'summary', reason: why };
}

async function publish({ github, context, core, markdown, botLogin = DEFAULT_BOT }) {
  const full = withMarker(markdown);
  const runUrl = `${context.serverUrl}/${context.repo.owner}/${context.repo.repo}/actions/runs/${context.runId}`;
  if (fromFork(context)) return toSummary(core, full, 'the pull request comes from a fork, whose token cannot comment');

  const { body, truncated } = fitComment(full, runUrl);
  const where = { owner: context.repo.owner, repo: context.repo.repo };
  const issue_number = context.payload.pull_request.number;
  let result;
  try {
    const comments = await github.paginate(github.rest.issues.listComments, { ...where, issue_number, per_page: 100 });
    const ours = comments.find((comment) => isOurs(comment, botLogin));
    if (ours) {
      await github.rest.issues.updateComment({ ...where, comment_id: ours.id, body });
      result = { action: 'updated', id: ours.id };
    } else {
      const created = await github.rest.issues.createComment({ ...where, issue_number, body });
      result = { action: 'created', id: created.data.id };
    }
  } catch (error) {
    if (!isReadOnlyTokenError(error)) throw error;
    return toSummary(core, full, `the token may not comment (${error.status || error.message})`);
  }
  if (truncated) await core.summary.addRaw(full).write();
  core.info(`gpuhosts preview comment ${result.action}: ${result.id}`);
  return { ...result, truncated };
}

module.exports = publish;
module.exports.MARKER = MARKER;
module.exports.COMMENT_LIMIT = COMMENT_LIMIT;

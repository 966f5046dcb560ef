import { afterAll } from 'vitest';

import { stopEngines } from './n8nParameters';
import { nodeParameterAgainstN8n } from './plainPathCases';

/*
 * The table of plainPath.test.ts on n8n's quickjs engine
 * (N8N_EXPRESSION_ENGINE=quickjs), in a file of its own: n8n starts one
 * isolated engine per process.
 */

afterAll(async () => {
	await stopEngines();
});

nodeParameterAgainstN8n(['quickjs']);

// @stepwell/client/adk: Google ADK's session service and memory service on
// stepwell, whose sessions and memories the Python client's stepwell.adk
// shares. It needs the optional peer dependency @google/adk; the rest of the
// client never loads it.
export {
  AlreadyExistsError,
  HEAD_APPEND_MODE,
  SessionNotFoundError,
  StaleSessionError,
  StepwellSessionService,
  type StepwellSessionServiceAddressOptions,
  type StepwellSessionServiceOptions,
} from "./session-service.js";
export { EVENT_KIND, SESSION_KIND, STATE_KIND, appTurn, eventId, quoteName, sessionTurn, userTurn } from "./layout.js";
export {
  StepwellMemoryService,
  type MemoryEmbedder,
  type StepwellMemoryServiceAddressOptions,
  type StepwellMemoryServiceOptions,
} from "./memory-service.js";

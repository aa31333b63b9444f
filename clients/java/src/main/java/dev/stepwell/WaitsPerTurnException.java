package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * RESOURCE_EXHAUSTED / WAITS_PER_TURN: the turn already holds the sidecar's {@code
 * --waits-per-turn-max} waits; nothing was created. Not retried: the same request cannot succeed
 * until the turn's waits are deleted (DeleteTurn).
 */
public class WaitsPerTurnException extends StepwellException {
  public WaitsPerTurnException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }
}

package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** ALREADY_EXISTS / CHECKPOINT_CONFLICT: same dedup key, different content; nothing changed. */
public class CheckpointConflictException extends StepwellException {
  public CheckpointConflictException(
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

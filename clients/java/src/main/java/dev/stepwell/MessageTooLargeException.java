package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;

/**
 * RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE: the request message is over the sidecar's {@code
 * --message-bytes-max}; nothing was stored. Never retried: the same request can never fit.
 */
public class MessageTooLargeException extends StepwellException {
  public MessageTooLargeException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }

  /** The sidecar's message size limit in bytes (metadata {@code limit_bytes}), if it sent one. */
  public OptionalLong limitBytes() {
    String raw = metadata().get("limit_bytes");
    if (raw == null) return OptionalLong.empty();
    try {
      return OptionalLong.of(Long.parseLong(raw));
    } catch (NumberFormatException e) {
      return OptionalLong.empty();
    }
  }
}
